package nb

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/model/synth"
)

// The KV cache starts at minCache positions, not the model's context, and
// grows as prompts need, keeping what it holds: a continued prefill across
// a growth gives the logits of one pass.
func TestTheCacheGrowsAsPromptsNeed(t *testing.T) {
	shape := synth.Shapes["tiny-llama"]
	shape.Context = 1 << 16
	w, err := synth.Generate(shape, gguf.F32, 3)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "long.gguf")
	require.NoError(t, w.WriteFile(path))
	m := Open(path, Backend("cpu"))

	m.Prefill([]int32{1, 2, 3})
	require.Equal(t, minCache, m.sess.Capacity())
	ids := make([]int32, minCache+100)
	for i := range ids {
		ids[i] = int32(1 + i*7%500)
	}
	split := minCache - 20
	whole := m.Prefill(ids, AllLogits())
	require.Equal(t, 2*minCache, m.sess.Capacity(), "doubled")

	m2 := Open(path, Backend("cpu"))
	m2.Prefill(ids[:split])
	require.Equal(t, minCache, m2.sess.Capacity())
	rest := m2.Prefill(ids[split:], Continue(), AllLogits())
	require.Equal(t, 2*minCache, m2.sess.Capacity(), "grown while continuing")
	a, b := Must(whole.Point("logits")), Must(rest.Point("logits"))
	for i := range b.Rows {
		for j, v := range b.Row(i) {
			// Two prefills of the same tokens, one in two parts: float32
			// sums in other orders, a few ulps of logits of size ~1.
			require.InDelta(t, a.At(split+i, j), v, 1e-4, "row %d", split+i)
		}
	}
	g, err := m2.TryGenerate(ids[:10], 5)
	require.NoError(t, err)
	require.Len(t, g.Tokens, 5)
}
