package engine_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/enginetest"
)

// A session keeps its prefill buffers: a prefill like the last one
// allocates nothing, and no prefill reads what an earlier one left in them.
// Each request below runs on a session whose kept buffers are filled with NaN
// before it, and must give bit-identically what the plain CPU backend gives.
func TestPrefillsReuseBuffersAndReadNothingStale(t *testing.T) {
	m := genModel(t, "tiny-qwen3", gguf.Q8_0, 5)
	pb := &enginetest.PoisonBackend{Backend: cpu.New(0)}
	pe, err := engine.NewEngine(m, pb)
	require.NoError(t, err)
	ps, err := pe.NewSession(64)
	require.NoError(t, err)
	st := pb.Last()
	ref, err := newEngine(t, m).NewSession(64)
	require.NoError(t, err)
	defer ref.Close()

	steer := make([]float32, m.DModel)
	for i := range steer {
		steer[i] = float32(i%7) - 3
	}
	all := engine.Options{Capture: engine.CaptureAll(), Logits: engine.LogitsAll, Predict: true}
	requests := []struct {
		what   string
		tokens []int32
		cont   bool
		o      engine.Options
		allocs int // -1: any
	}{
		{"capture-all", testTokens, false, all, -1},
		{"the same again", testTokens, false, all, 0},
		{"continued, narrower", testTokens[:5], true, engine.Options{Capture: engine.CaptureOf("blocks.*.attn.hook_pattern", "logits"), Logits: engine.LogitsLast}, -1},
		{"shorter, nothing captured, flash attention", testTokens[:3], false, engine.Options{}, -1},
		{"shorter again, with interventions", testTokens[2:9], false, engine.Options{Capture: engine.CaptureOf("blocks.1.*"), Logits: engine.LogitsAll,
			Hooks: []engine.Hook{engine.AddVector("blocks.0.hook_resid_post", steer, 0.5, nil), engine.AblateHead(1, 2)}}, -1},
		{"capture-all after all that", testTokens, false, all, -1},
	}
	ctx := context.Background()
	for _, q := range requests {
		if !q.cont {
			ps.Reset()
			ref.Reset()
		}
		st.PoisonKept()
		before := st.Allocs
		got, err := ps.Prefill(ctx, q.tokens, q.o)
		require.NoError(t, err, q.what)
		if q.allocs >= 0 {
			require.Equal(t, q.allocs, st.Allocs-before, "%s: allocations", q.what)
		}
		want, err := ref.Prefill(ctx, q.tokens, q.o)
		require.NoError(t, err, q.what)
		require.Equal(t, want.Names, got.Names, q.what)
		for _, name := range want.Names {
			enginetest.RequireBits(t, want.Tensor(name).Data, got.Tensor(name).Data, "%s: %s", q.what, name)
		}
		require.Equal(t, want.Predicted, got.Predicted, q.what)
	}

	cache := 2 * m.Layers
	require.Greater(t, len(st.Live), cache, "the session keeps its last prefill's buffers")
	ps.Close()
	require.Empty(t, st.Live, "Close frees the KV cache and every kept buffer")
}

// A run hands its buffers back when it ends; one that a later Start, or
// the session's Close, took them from says so instead of reading them.
func TestRunsEndWhenTheirBuffersGo(t *testing.T) {
	m := genModel(t, "tiny-llama", gguf.Q8_0, 2)
	e := newEngine(t, m)
	s, err := e.NewSession(0)
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	o := engine.Options{Capture: engine.CaptureAll(), Logits: engine.LogitsAll}

	first, err := s.Start(ctx, testTokens, o)
	require.NoError(t, err)
	require.True(t, first.Next())
	second, err := s.Start(ctx, testTokens[:4], o)
	require.NoError(t, err)
	require.False(t, first.Next())
	require.ErrorContains(t, first.Err(), "a later prefill on this run's session took its buffers")
	_, err = first.Trace()
	require.ErrorContains(t, err, "took its buffers")
	_, err = first.Finish()
	require.ErrorContains(t, err, "took its buffers")
	require.Equal(t, 0, s.Pos(), "the superseded run does not move the session")

	tr, err := second.Finish()
	require.NoError(t, err)
	enginetest.RequireBits(t, prefill(t, e, testTokens[:4], o).Tensor("logits").Data, tr.Tensor("logits").Data)
	require.Equal(t, 4, s.Pos())
	_, err = second.Trace()
	require.ErrorContains(t, err, "the run is over")
	_, err = second.Finish()
	require.ErrorContains(t, err, "the run has finished already")
	require.Equal(t, 4, s.Pos(), "a second Finish does not move the session again")
	closed, err := s.Start(ctx, testTokens[:1], o)
	require.NoError(t, err)
	closed.Close()
	_, err = closed.Finish()
	require.ErrorContains(t, err, "the run is over", "closed, not finished")

	third, err := s.Start(ctx, testTokens[:2], o)
	require.NoError(t, err)
	s.Close()
	require.False(t, third.Next())
	require.ErrorContains(t, third.Err(), "session was closed")
}

// A CPU trace is its run's capture memory, handed over without a copy: the
// session's next prefills must not write into a trace already returned.
func TestCPUTraceOutlivesTheNextPrefills(t *testing.T) {
	m := genModel(t, "tiny-qwen3", gguf.Q8_0, 6)
	s, err := newEngine(t, m).NewSession(64)
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	all := engine.Options{Capture: engine.CaptureAll(), Logits: engine.LogitsAll}
	first, err := s.Prefill(ctx, testTokens, all)
	require.NoError(t, err)
	kept := map[string][]float32{}
	for _, name := range first.Names {
		kept[name] = append([]float32(nil), first.Tensor(name).Data...)
	}
	for _, tokens := range [][]int32{testTokens[3:], testTokens[:5]} {
		require.NoError(t, s.Reset())
		_, err := s.Prefill(ctx, tokens, all)
		require.NoError(t, err)
	}
	for _, name := range first.Names {
		enginetest.RequireBits(t, kept[name], first.Tensor(name).Data, name)
	}
}
