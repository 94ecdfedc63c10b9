package gpu_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gpu"
	"github.com/stratalab/strata/gpu/cpu"
	"github.com/stratalab/strata/gpu/internal/gputest"
	"github.com/stratalab/strata/gpu/trace"
)

// Two CPU backends as two tiers: a split run equals the unsplit one bit for
// bit, over random placements, captures and interventions.
func TestTwoCPUTiersEqualOne(t *testing.T) {
	for _, shape := range []string{"tiny-qwen3", "tiny-gpt2", "tiny-gemma3", "tiny-qwen3moe"} {
		t.Run(shape, func(t *testing.T) {
			cases := 6
			if testing.Short() {
				cases = 2
			}
			gputest.CheckTiers(t, [2]gpu.Backend{cpu.New(0), cpu.New(0)}, genModel(t, shape, gguf.Q8_0, 5), 11, cases)
		})
	}
}

func TestTieredEngineRefusesBadPlacements(t *testing.T) {
	m := genModel(t, "tiny-llama", gguf.F32, 1)
	two := []gpu.Backend{cpu.New(1), cpu.New(1)}
	for _, c := range []struct {
		p    gpu.Placement
		want string
	}{
		{gpu.Placement{Layers: []int{0}}, "the placement has 1 layers; the model has 2"},
		{gpu.Placement{Layers: []int{0, 2}}, "puts layer 1 on tier 2; there are 2 tiers (0 to 1)"},
		{gpu.Placement{Embed: -1, Layers: []int{0, 1}}, "puts the embedding on tier -1"},
		{gpu.Placement{Layers: []int{0, 0}}, "tier 1 holds nothing"},
	} {
		_, err := gpu.NewTieredEngine(m, two, c.p)
		require.ErrorContains(t, err, c.want)
	}
	_, err := gpu.NewTieredEngine(m, []gpu.Backend{cpu.New(1), nil}, gpu.OneTier(2))
	require.ErrorContains(t, err, "a nil one true")
}

func TestCancelOnSecondCPUTier(t *testing.T) {
	gputest.CheckTierCancel(t, [2]gpu.Backend{cpu.New(0), cpu.New(0)}, genModel(t, "tiny-qwen3", gguf.Q8_0, 2))
}

// Sessions of one tiered engine run from several goroutines at once, each
// hopping tiers, and each gets the unsplit engine's trace.
func TestTieredSessionsRunConcurrently(t *testing.T) {
	m := genModel(t, "tiny-qwen3", gguf.Q8_0, 4)
	split, err := gpu.NewTieredEngine(m, []gpu.Backend{cpu.New(1), cpu.New(1)}, gpu.Placement{Embed: 1, Layers: []int{0, 1, 0, 1}, Head: 0})
	require.NoError(t, err)
	o := gpu.Options{Capture: gpu.CaptureAll(), Logits: gpu.LogitsAll}
	want := prefill(t, newEngine(t, m), testTokens, o)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	got := make([]*trace.Trace, 4)
	for g := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := split.NewSession(0)
			if err != nil {
				errs[g] = err
				return
			}
			defer s.Close()
			for range 3 {
				s.Reset()
				if got[g], errs[g] = s.Prefill(context.Background(), testTokens, o); errs[g] != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	for g := range got {
		require.NoError(t, errs[g])
		for _, name := range want.Names {
			require.Equal(t, want.Tensor(name).Data, got[g].Tensor(name).Data, "goroutine %d: %s", g, name)
		}
	}
}
