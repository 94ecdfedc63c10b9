package vulkan_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/trace"
)

// Issue 47.12: the CPU and Vulkan backends disagreed on where NaN appears
// in hook_pattern (the AVX-512 softmax let a row's NaN go). A NaN in one
// key, or in one score, makes each row that sees it NaN in every entry,
// masked keys included (0 times the NaN normaliser), and no other row, on
// both backends alike: through the fused attention that captures the
// pattern, and through the materialising path a hook on the scores takes.
func TestNaNInAttentionLandsAlikeOnCPUAndVulkan(t *testing.T) {
	m := genModel(t, "tiny-llama", gguf.Q8_0, 1)
	c, v := engines(t, m)
	const T, nanKey, nanRow = 40, 5, 37
	tokens := make([]int32, T)
	for i := range tokens {
		tokens[i] = int32(i * 7 % 500)
	}
	nan := float32(math.NaN())
	group := m.Heads / m.KVHeads
	for _, tc := range []struct {
		name string
		hook engine.Hook
		// sees says whether row i of head h reads the NaN.
		sees func(h, i int) bool
	}{
		{"a key", engine.Hook{Point: "blocks.0.attn.hook_rot_k", Host: func(_ string, shape []int, d []float32) error {
			d[nanKey*shape[1]*shape[2]] = nan // key nanKey of KV head 0
			return nil
		}}, func(h, i int) bool { return h/group == 0 && i >= nanKey }},
		{"a score", engine.Hook{Point: "blocks.0.attn.hook_attn_scores", Host: func(_ string, shape []int, d []float32) error {
			d[(1*shape[1]+nanRow)*shape[2]+nanKey] = nan // head 1
			return nil
		}}, func(h, i int) bool { return h == 1 && i == nanRow }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := engine.Options{Capture: engine.CaptureOf("blocks.0.attn.hook_pattern"), Hooks: []engine.Hook{tc.hook}}
			want := prefill(t, c, tokens, o)
			got := prefill(t, v, tokens, o)
			for _, tr := range []struct {
				backend string
				data    []float32
			}{{"cpu", mustGet(t, want)}, {"vulkan", mustGet(t, got)}} {
				for h := range m.Heads {
					for i := range T {
						for j := range T {
							x := tr.data[(h*T+i)*T+j]
							require.Equal(t, tc.sees(h, i), math.IsNaN(float64(x)), "%s: head %d, row %d, key %d is %v", tr.backend, h, i, j, x)
						}
					}
				}
			}
		})
	}
}

func mustGet(t *testing.T, tr *trace.Trace) []float32 {
	t.Helper()
	x, err := tr.Get("blocks.0.attn.hook_pattern")
	require.NoError(t, err)
	return x.Data
}
