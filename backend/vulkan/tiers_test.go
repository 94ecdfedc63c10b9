package vulkan_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/vulkan"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/enginetest"
	"github.com/stratalab/strata/model/synth"
	"github.com/stratalab/strata/trace"
)

// Two logical devices opened on one physical device, as two tiers: a split
// run equals the run on one of them bit for bit, over random placements,
// captures and interventions.
func TestTwoVulkanTiersEqualOne(t *testing.T) {
	first := testBackend(t)
	second, err := vulkan.Open(vulkan.Options{Validation: shared.validating})
	require.NoError(t, err)
	defer func() { require.NoError(t, second.Close()) }()
	cases := 4
	if testing.Short() {
		cases = 2
	}
	for _, shape := range []string{"tiny-qwen3", "tiny-gpt2", "tiny-qwen3moe"} {
		t.Run(shape, func(t *testing.T) {
			m, err := synth.Random(synth.Shapes[shape], gguf.Q8_0, 5)
			require.NoError(t, err)
			enginetest.CheckTiers(t, [2]backend.Backend{first, second}, m, 13, cases)
		})
	}
}

func TestCancelOnSecondVulkanTier(t *testing.T) {
	first := testBackend(t)
	second, err := vulkan.Open(vulkan.Options{Validation: shared.validating})
	require.NoError(t, err)
	defer func() { require.NoError(t, second.Close()) }()
	m, err := synth.Random(synth.Shapes["tiny-qwen3"], gguf.Q8_0, 2)
	require.NoError(t, err)
	enginetest.CheckTierCancel(t, [2]backend.Backend{first, second}, m)
}

// The points before the layers and after them are on different tiers when
// the embedding and the head are: their captures must not share an arena,
// even with no layer's point captured between them.
func TestEmbeddingAndHeadCapturesOnTheirTiers(t *testing.T) {
	first := testBackend(t)
	second, err := vulkan.Open(vulkan.Options{Validation: shared.validating})
	require.NoError(t, err)
	defer func() { require.NoError(t, second.Close()) }()
	m, err := synth.Random(synth.Shapes["tiny-gpt2"], gguf.Q8_0, 3)
	require.NoError(t, err)
	o := engine.Options{Capture: engine.CaptureOf("hook_embed", "hook_pos_embed", "ln_final.*", "logits"), Logits: engine.LogitsAll}
	tokens := []int32{7, 1, 8, 2, 8}
	var traces []*trace.Trace
	for _, e := range []func() (*engine.Engine, error){
		func() (*engine.Engine, error) { return engine.NewEngine(m, first) },
		func() (*engine.Engine, error) {
			return engine.NewTieredEngine(m, []backend.Backend{first, second}, engine.Placement{Embed: 0, Layers: []int{0, 1}, Head: 1})
		},
		func() (*engine.Engine, error) {
			return engine.NewTieredEngine(m, []backend.Backend{first, second}, engine.Placement{Embed: 1, Layers: []int{0, 0}, Head: 1})
		},
	} {
		e, err := e()
		require.NoError(t, err)
		s, err := e.NewSession(0)
		require.NoError(t, err)
		tr, err := s.Prefill(context.Background(), tokens, o)
		require.NoError(t, err)
		require.NoError(t, tr.Load())
		s.Close()
		traces = append(traces, tr)
	}
	for _, tr := range traces[1:] {
		require.Equal(t, traces[0].Names, tr.Names)
		for _, name := range tr.Names {
			enginetest.RequireBits(t, traces[0].Tensor(name).Data, tr.Tensor(name).Data, name)
		}
	}
}

// A tensor of one logical device used on another is an error, not a fault.
func TestTensorOfAnotherDeviceIsRefused(t *testing.T) {
	first := testBackend(t)
	second, err := vulkan.Open(vulkan.Options{Validation: shared.validating})
	require.NoError(t, err)
	defer func() { require.NoError(t, second.Close()) }()
	a, b := first.NewStream(), second.NewStream()
	defer a.Close()
	defer b.Close()
	x, err := a.Alloc("x", 4)
	require.NoError(t, err)
	y, err := b.Alloc("y", 4)
	require.NoError(t, err)
	b.Add(y, y, x, 4)
	require.ErrorContains(t, b.Sync(), "vulkan: tensor x lives on another device")
	b.Add(y, y, y, 4)
	require.NoError(t, b.Sync(), "the stream works again")
}
