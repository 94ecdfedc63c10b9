package vulkan_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend/cpu"
	"github.com/stratalab/strata/backend/vulkan"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/enginetest"
)

// A session's kept buffers go from prefill to prefill with NaN in them, and
// every prefill still matches the CPU backend: no kernel reads what the
// prefill has not written. A prefill like the last one allocates no buffer,
// not even a readback mirror.
func TestPrefillsReuseBuffersAndReadNothingStale(t *testing.T) {
	b := testBackend(t)
	m := genModel(t, "tiny-qwen3", gguf.Q8_0, 5)
	pb := &enginetest.PoisonBackend{Backend: b}
	ve, err := engine.NewEngine(m, pb)
	require.NoError(t, err)
	vs, err := ve.NewSession(64)
	require.NoError(t, err)
	defer vs.Close()
	st := pb.Last()
	ce, err := engine.NewEngine(m, cpu.New(0))
	require.NoError(t, err)
	cs, err := ce.NewSession(64)
	require.NoError(t, err)
	defer cs.Close()

	all := engine.Options{Capture: engine.CaptureAll(), Logits: engine.LogitsAll, Predict: true}
	requests := []struct {
		what   string
		tokens []int32
		cont   bool
		o      engine.Options
	}{
		{"capture-all", testTokens, false, all},
		{"continued by 5, narrower (matrix-vector kernels)", testTokens[:5], true, engine.Options{Capture: engine.CaptureOf("blocks.*.attn.hook_pattern", "logits"), Logits: engine.LogitsLast}},
		{"3 tokens, nothing captured (flash attention)", testTokens[:3], false, engine.Options{Predict: true}},
		{"7 tokens, one layer, with an ablation", testTokens[2:9], false, engine.Options{Capture: engine.CaptureOf("blocks.1.*"), Logits: engine.LogitsAll,
			Hooks: []engine.Hook{engine.AblateHead(1, 2)}}},
		{"capture-all again", testTokens, false, all},
	}
	ctx := context.Background()
	for _, q := range requests {
		if !q.cont {
			vs.Reset()
			cs.Reset()
		}
		st.PoisonKept()
		got, err := vs.Prefill(ctx, q.tokens, q.o)
		require.NoError(t, err, q.what)
		want, err := cs.Prefill(ctx, q.tokens, q.o)
		require.NoError(t, err, q.what)
		requireSameTraceQuiet(t, got, want, q.what)
		if q.o.Predict {
			requirePredictions(t, got, want, m.Vocab)
		}
	}

	buffers, used := vulkan.DeviceMemory(b)
	allocs := st.Allocs
	vs.Reset()
	_, err = vs.Prefill(ctx, testTokens, all)
	require.NoError(t, err)
	require.Equal(t, allocs, st.Allocs, "the same request again allocates no tensor")
	requireMemoryBack(t, b, buffers, used, "after the same request again")
}
