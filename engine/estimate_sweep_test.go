package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/model"
)

// The sweep of issue 47 over estimates in 64 bits: every size metadata can
// give (model.MaxDim) alone and together, with prompts and caches up to
// 2^24 positions and past, batches, every capture and all logits. No part
// is ever negative or wraps to less than a shorter prompt's; a part whose
// size, counted in float64, passes MaxEstimate is MaxEstimate, as is every
// other part of that estimate, and a plan of it fits no device; below it,
// the KV cache is counted exactly. MicroBatches refuses what passes it.
func TestEstimatesSaturateAt64Bits(t *testing.T) {
	base := genModel(t, "tiny-llama", gguf.F32, 1).Config
	const big = model.MaxDim
	configs := map[string]func(c *model.Config){
		"base":        func(c *model.Config) {},
		"heads":       func(c *model.Config) { c.Heads, c.KVHeads = big, big },
		"query heads": func(c *model.Config) { c.Heads = big },
		"head dim":    func(c *model.Config) { c.HeadDim = big },
		"heads and head dim": func(c *model.Config) {
			c.Heads, c.KVHeads, c.HeadDim = big, big, big
		},
		"vocab":   func(c *model.Config) { c.Vocab = big },
		"d_model": func(c *model.Config) { c.DModel = big },
		"ffn":     func(c *model.Config) { c.FFN = big },
		"every width": func(c *model.Config) {
			c.DModel, c.FFN, c.Vocab, c.Heads, c.KVHeads, c.HeadDim = big, big, big, big, big, big
		},
		"512 heads":     func(c *model.Config) { c.Heads, c.KVHeads = 512, 512 },
		"layers":        func(c *model.Config) { c.Layers = 4096 },
		"layers, width": func(c *model.Config) { c.Layers, c.DModel, c.KVHeads, c.Heads, c.HeadDim = 4096, big, 512, 512, big },
		"experts": func(c *model.Config) {
			c.Experts, c.ExpertsUsed, c.ExpertFFN, c.DModel = 512, 512, big, big
		},
	}
	lengths := []int{1, 2048, 1 << 20, big, 1 << 31, 1 << 40, 1 << 62}
	options := map[string]engine.Options{
		"none":        {Logits: engine.LogitsLast},
		"all":         {Capture: engine.CaptureAll(), Logits: engine.LogitsAll},
		"patterns":    {Capture: engine.CaptureOf("blocks.*.attn.hook_pattern"), Logits: engine.LogitsAll},
		"long prompt": {Capture: engine.CaptureOf("blocks.*.hook_resid_post"), Logits: engine.LogitsNone},
	}
	check := func(what string, c *model.Config, est engine.Estimate, lower ...float64) {
		t.Helper()
		parts := []int64{est.Scratch, est.Capture, est.Cache}
		saturated := est == engine.Estimate{Scratch: engine.MaxEstimate, Capture: engine.MaxEstimate, Cache: engine.MaxEstimate}
		for i, p := range parts {
			require.True(t, p >= 0 && p <= engine.MaxEstimate, "%s: part %d is %d", what, i, p)
			if float64(p) < lower[i] && !saturated {
				require.Failf(t, "wrapped", "%s: part %d is %d, below the %g it holds at least", what, i, p, lower[i])
			}
			if lower[i] > engine.MaxEstimate {
				require.True(t, saturated, "%s: part %d passes MaxEstimate (%g): every part saturates, not %+v", what, i, lower[i], est)
			}
		}
		require.True(t, est.Total() >= max(est.Scratch, est.Capture, est.Cache), "%s: Total wraps", what)
	}
	for name, edit := range configs {
		c := base
		c.Context = 1 << 24
		edit(&c)
		kvBytes := func(positions float64) float64 { return 8 * float64(c.Layers) * positions * float64(c.KVDim()) }
		for oname, o := range options {
			start := time.Now()
			var last engine.Estimate
			for _, n := range lengths {
				what := fmt.Sprintf("%s, %s, %d tokens", name, oname, n)
				est := engine.EstimateMemory(&c, n, 0, n, o)
				pattern := 0.0
				if oname != "none" && oname != "long prompt" {
					pattern = 4 * float64(c.Layers) * float64(c.Heads) * float64(n) * float64(n)
				}
				logits := 0.0
				if o.Logits == engine.LogitsAll {
					logits = 4 * float64(n) * float64(c.Vocab)
				}
				check(what, &c, est, logits, pattern, kvBytes(float64(n)))
				if est.Cache != engine.MaxEstimate {
					require.Equal(t, int64(kvBytes(float64(n))), est.Cache, "%s: the KV cache exactly", what)
				}
				require.GreaterOrEqual(t, est.Total(), last.Total(), "%s: no less than a shorter prompt's", what)
				last = est

				batch := []int{n, n, n}
				est = engine.EstimateBatch(&c, batch, o)
				check(what+", a batch of 3", &c, est, 3*logits, 3*pattern, kvBytes(3*float64(n)))

				needs := engine.Needs(&model.Model{Config: c}, engine.OneTier(c.Layers), engine.PlanRequest{Capacity: n, Tokens: n, Options: o})
				require.Len(t, needs, 1)
				nd := needs[0]
				check(what+", Needs", &c, engine.Estimate{Scratch: nd.Scratch, Capture: nd.Capture, Cache: nd.Cache}, 0, pattern, kvBytes(float64(n)))
				if nd.Cache == engine.MaxEstimate {
					plan := engine.Plan{Placement: engine.OneTier(c.Layers), Devices: []int{0}, Needs: needs}
					require.ErrorIs(t, plan.Check([]engine.Device{{Name: "huge", Free: 1 << 62}}), engine.ErrDoesNotFit, what)
					_, err := engine.MicroBatches(&c, batch, o, 1<<62)
					require.Error(t, err, what)
				}
			}
			require.Less(t, time.Since(start), 20*time.Second, "%s, %s: estimates take long", name, oname)
		}
	}
}
