package engine_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/enginetest"
	"github.com/stratalab/strata/trace"
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
			enginetest.CheckTiers(t, [2]backend.Backend{cpu.New(0), cpu.New(0)}, genModel(t, shape, gguf.Q8_0, 5), 11, cases)
		})
	}
}

func TestTieredEngineRefusesBadPlacements(t *testing.T) {
	m := genModel(t, "tiny-llama", gguf.F32, 1)
	two := []backend.Backend{cpu.New(1), cpu.New(1)}
	for _, c := range []struct {
		p    engine.Placement
		want string
	}{
		{engine.Placement{Layers: []int{0}}, "the placement has 1 layers; the model has 2"},
		{engine.Placement{Layers: []int{0, 2}}, "puts layer 1 on tier 2; there are 2 tiers (0 to 1)"},
		{engine.Placement{Embed: -1, Layers: []int{0, 1}}, "puts the embedding on tier -1"},
		{engine.Placement{Layers: []int{0, 0}}, "tier 1 holds nothing"},
	} {
		_, err := engine.NewTieredEngine(m, two, c.p)
		require.ErrorContains(t, err, c.want)
	}
	_, err := engine.NewTieredEngine(m, []backend.Backend{cpu.New(1), nil}, engine.OneTier(2))
	require.ErrorContains(t, err, "a nil one true")
}

func TestCancelOnSecondCPUTier(t *testing.T) {
	enginetest.CheckTierCancel(t, [2]backend.Backend{cpu.New(0), cpu.New(0)}, genModel(t, "tiny-qwen3", gguf.Q8_0, 2))
}

// Sessions of one tiered engine run from several goroutines at once, each
// hopping tiers, and each gets the unsplit engine's trace.
func TestTieredSessionsRunConcurrently(t *testing.T) {
	m := genModel(t, "tiny-qwen3", gguf.Q8_0, 4)
	split, err := engine.NewTieredEngine(m, []backend.Backend{cpu.New(1), cpu.New(1)}, engine.Placement{Embed: 1, Layers: []int{0, 1, 0, 1}, Head: 0})
	require.NoError(t, err)
	o := engine.Options{Capture: engine.CaptureAll(), Logits: engine.LogitsAll}
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
