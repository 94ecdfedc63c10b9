package enginetest

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/trace"
)

// BatchPrompts are ragged prompts for batch tests: lengths 12, 5, 1 and 9,
// the one-token prompt in the middle, two sharing a prefix.
var BatchPrompts = [][]int32{
	{5, 77, 300, 12, 12, 450, 99, 256, 3, 140, 77, 300},
	{9, 1, 200, 31, 7},
	{42},
	{5, 77, 300, 60, 2, 2, 500, 11, 8},
}

// CheckBatch holds a batch prefill on e to its prompts prefilled one at a
// time on e, each in a new session: bit for bit where tol is 0, else within
// tol of max|single| per point. It runs the batch of BatchPrompts, a batch
// of one, every point captured with every logit row, the last rows alone
// with the predictions, hooks (a head ablated, a vector added at each
// prompt's last row, a host function) that act per prompt, hooks on the
// attention scores and pattern (which see each prompt's [heads, T, T]) with
// the patterns captured and the scores not, and a capture
// budget that splits the batch into micro-batches; each batch also runs in one
// session reused for every batch, which must give the same bits as the
// engine's batch in a new session.
func CheckBatch(t *testing.T, e *engine.Engine, tol float64) {
	t.Helper()
	c := &e.Model.Config
	steer := make([]float32, c.DModel)
	for i := range steer {
		steer[i] = float32(i%7) - 3
	}
	hooks := []engine.Hook{
		engine.AblateHead(0, 1),
		engine.AddVector(trace.LayerPoint(c.Layers-1, trace.ResidMid), steer, 0.5, []int{-1}),
		// A host hook that reads its shape: the prompt's rows, not the batch's.
		{Point: trace.LayerPoint(0, trace.ResidPost), Host: func(_ string, shape []int, data []float32) error {
			data[len(data)-1] += float32(shape[0])
			return nil
		}},
	}
	// Hooks on the maps, which the CPU's fused attention cannot take: the
	// scores go to scratch, the patterns to the trace.
	maps := []engine.Hook{
		engine.Scale(trace.LayerPoint(0, trace.AttnScores), 0.5),
		{Point: trace.LayerPoint(c.Layers-1, trace.AttnPattern), Host: func(_ string, shape []int, data []float32) error {
			if len(shape) != 3 || shape[0] != c.Heads || shape[1] != shape[2] {
				return fmt.Errorf("a pattern of shape %v, not a prompt's [%d, T, T]", shape, c.Heads)
			}
			data[len(data)-1] += float32(shape[1])
			return nil
		}},
	}
	options := map[string]engine.Options{
		"all":   {Capture: engine.CaptureAll(), Logits: engine.LogitsAll},
		"maps":  {Capture: engine.CaptureOf("blocks.*.attn.hook_pattern", "blocks.*.hook_resid_post"), Logits: engine.LogitsLast, Hooks: maps},
		"last":  {Capture: engine.CaptureOf("blocks.*.hook_resid_post"), Logits: engine.LogitsLast, Predict: true},
		"hooks": {Capture: engine.CaptureOf("blocks.*.hook_resid_post", "ln_final.hook_normalized"), Logits: engine.LogitsLast, Hooks: hooks},
	}
	// A budget that holds the longest prompt's captures alone: the ragged
	// batch runs as micro-batches.
	micro := engine.Options{Capture: engine.CaptureOf("blocks.*.hook_resid_post", "blocks.0.hook_mlp_out", "blocks.0.attn.hook_attn_scores"), Logits: engine.LogitsAll, Hooks: hooks[1:]}
	micro.Budget = engine.EstimateBatch(c, []int{len(BatchPrompts[0])}, micro).Capture
	ends, err := engine.MicroBatches(c, lens(BatchPrompts), micro, 0)
	require.NoError(t, err)
	require.Greater(t, len(ends), 1, "the micro-batch budget splits the batch")
	options["micro"] = micro
	// A session of 16 positions, used for batch after batch: its cache
	// grows past that for a batch and keeps what it grew to. (Phi-3's
	// RoPE depends on the capacity: there, the model's context, as the
	// engine's batch takes.)
	capacity := 16
	if c.LongRope != nil {
		capacity = c.Context
	}
	bs, err := e.NewSession(capacity)
	require.NoError(t, err)
	defer bs.Close()
	batches := map[string][][]int32{"ragged": BatchPrompts, "one": BatchPrompts[1:2]}
	for bn, prompts := range batches {
		for on, o := range options {
			t.Run(bn+"/"+on, func(t *testing.T) {
				got, err := e.PrefillBatch(context.Background(), prompts, o)
				require.NoError(t, err)
				require.Len(t, got, len(prompts))
				again, err := bs.PrefillBatch(context.Background(), prompts, o)
				require.NoError(t, err)
				require.Equal(t, 0, bs.Pos(), "a batch leaves nothing to continue")
				for i := range prompts {
					requireSameTrace(t, got[i], again[i], 0, fmt.Sprintf("prompt %d in a reused session", i))
					require.NoError(t, again[i].Close())
				}
				for i, p := range prompts {
					s, err := e.NewSession(0)
					require.NoError(t, err)
					want, err := s.Prefill(context.Background(), p, o)
					require.NoError(t, err)
					requireSameTrace(t, want, got[i], tol, fmt.Sprintf("prompt %d", i))
					require.NoError(t, want.Close())
					require.NoError(t, got[i].Close())
					s.Close() // after reading want: a GPU trace is freed with its session
				}
			})
		}
	}
}

func lens(prompts [][]int32) []int {
	out := make([]int, len(prompts))
	for i, p := range prompts {
		out[i] = len(p)
	}
	return out
}

func requireSameTrace(t *testing.T, want, got *trace.Trace, tol float64, what string) {
	t.Helper()
	require.Equal(t, want.Tokens, got.Tokens, what)
	require.Equal(t, want.Pieces, got.Pieces, what)
	require.Equal(t, want.Pos0, got.Pos0, what)
	require.Equal(t, want.Names, got.Names, what)
	if tol == 0 {
		require.Equal(t, want.Predicted, got.Predicted, what)
	} else {
		require.Len(t, got.Predicted, len(want.Predicted), what)
	}
	for _, name := range want.Names {
		w, err := want.Get(name)
		require.NoError(t, err)
		g, err := got.Get(name)
		require.NoError(t, err)
		require.Equal(t, w.Shape, g.Shape, "%s: %s", what, name)
		if tol == 0 {
			RequireBits(t, w.Data, g.Data, "%s: %s", what, name)
			continue
		}
		worst, scale := 0.0, 0.0
		for j := range w.Data {
			wj, gj := float64(w.Data[j]), float64(g.Data[j])
			// Masked scores are -Inf in both, which no tolerance measures.
			if math.IsInf(wj, 0) || math.IsInf(gj, 0) {
				require.Equal(t, wj, gj, "%s: %s element %d", what, name, j)
				continue
			}
			worst = max(worst, math.Abs(gj-wj))
			scale = max(scale, math.Abs(wj))
		}
		require.LessOrEqual(t, worst, tol*scale, "%s: %s", what, name)
	}
}
