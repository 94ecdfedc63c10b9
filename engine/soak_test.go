package engine_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/enginetest"
)

// Soak runs many prefills of random lengths with random capture plans,
// some continuing earlier ones, and checks each against a capture-free
// one-shot run of the same tokens, and that memory returns to its baseline
// once the sessions, which keep their last prefill's buffers, are closed.
func TestSoakRandomPrefills(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 100
	}
	m := genModel(t, "tiny-qwen3", gguf.Q8_0, 21)
	e := newEngine(t, m)
	r := rand.New(rand.NewPCG(1, 2))
	s, err := e.NewSession(128)
	require.NoError(t, err)
	ref, err := e.NewSession(128)
	require.NoError(t, err)
	ctx := context.Background()
	var history []int32

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range n {
		cont := len(history) > 0 && r.IntN(3) == 0 && s.Capacity()-len(history) >= 2
		if !cont {
			s.Reset()
			history = history[:0]
		}
		T := 1 + r.IntN(min(48, s.Capacity()-len(history)))
		tokens := make([]int32, T)
		for j := range tokens {
			tokens[j] = int32(r.IntN(m.Vocab))
		}
		c := enginetest.RandomCapture(r, m.Layers)
		tr, err := s.Prefill(ctx, tokens, engine.Options{Capture: c, Logits: engine.LogitsAll})
		require.NoError(t, err, "prefill %d", i)
		history = append(history, tokens...)

		// The whole history from position 0, in one go, with nothing captured.
		ref.Reset()
		want, err := ref.Prefill(ctx, history, engine.Options{Logits: engine.LogitsAll})
		require.NoError(t, err)
		got, full := tr.Tensor("logits").Data, want.Tensor("logits").Data
		require.Equal(t, full[len(full)-len(got):], got, "prefill %d (T=%d, continued %v, capture %v): logits differ from a one-shot run", i, T, cont, c)
	}
	s.Close()
	ref.Close()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("%d prefills; heap in use %.1f MiB before, %.1f MiB after", n, float64(before.HeapInuse)/(1<<20), float64(after.HeapInuse)/(1<<20))
	require.Less(t, float64(after.HeapInuse), float64(before.HeapInuse)+8<<20, "memory returns to its baseline")
}
