package trace_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/trace"
)

func TestPaddedStacksOnTheRight(t *testing.T) {
	a, b := trace.New(), trace.New()
	a.Put("x", &trace.Tensor{Shape: []int{2, 3}, Data: []float32{1, 2, 3, 4, 5, 6}})
	b.Put("x", &trace.Tensor{Shape: []int{1, 3}, Data: []float32{7, 8, 9}})
	x, rows, err := trace.Padded([]*trace.Trace{b, a}, "x")
	require.NoError(t, err)
	require.Equal(t, []int{2, 2, 3}, x.Shape)
	require.Equal(t, []float32{7, 8, 9, 0, 0, 0, 1, 2, 3, 4, 5, 6}, x.Data)
	require.Equal(t, []int{1, 2}, rows)
	require.Equal(t, float32(8), x.At(0, 0, 1))

	b.Put("y", &trace.Tensor{Shape: []int{1, 2}, Data: []float32{1, 2}})
	a.Put("y", &trace.Tensor{Shape: []int{1, 3}, Data: []float32{1, 2, 3}})
	_, _, err = trace.Padded([]*trace.Trace{a, b}, "y")
	require.EqualError(t, err, "trace: Padded: trace 1's y is [1 2], trace 0's [1 3]: only the first dimension may differ")
	_, _, err = trace.Padded([]*trace.Trace{a, trace.New()}, "x")
	require.ErrorContains(t, err, "trace: Padded: trace 1: ")
	_, _, err = trace.Padded(nil, "x")
	require.EqualError(t, err, "trace: Padded of no traces")
}

// Attention maps stack as [batch, heads, queries, keys], each prompt's map
// in the top-left corner: patterns padded with 0, scores with -Inf.
func TestPaddedStacksAttentionMaps(t *testing.T) {
	const pattern, scores = "blocks.1.attn.hook_pattern", "blocks.1.attn.hook_attn_scores"
	a, b := trace.New(), trace.New()
	// 2 heads; a has 1 query over 1 key, b 2 queries over 2 keys.
	for _, name := range []string{pattern, scores} {
		a.Put(name, &trace.Tensor{Shape: []int{2, 1, 1}, Data: []float32{1, 2}})
		b.Put(name, &trace.Tensor{Shape: []int{2, 2, 2}, Data: []float32{3, 4, 5, 6, 7, 8, 9, 10}})
	}
	x, rows, err := trace.Padded([]*trace.Trace{a, b}, pattern)
	require.NoError(t, err)
	require.Equal(t, []int{2, 2, 2, 2}, x.Shape)
	require.Equal(t, []int{1, 2}, rows)
	require.Equal(t, []float32{1, 0, 0, 0, 2, 0, 0, 0, 3, 4, 5, 6, 7, 8, 9, 10}, x.Data)

	x, _, err = trace.Padded([]*trace.Trace{a, b}, scores)
	require.NoError(t, err)
	inf := float32(math.Inf(-1))
	require.Equal(t, []float32{1, inf, inf, inf, 2, inf, inf, inf, 3, 4, 5, 6, 7, 8, 9, 10}, x.Data)
	require.Equal(t, float32(9), x.At(1, 1, 1, 0))

	b.Put(pattern, &trace.Tensor{Shape: []int{3, 1, 1}, Data: []float32{1, 2, 3}})
	_, _, err = trace.Padded([]*trace.Trace{a, b}, pattern)
	require.EqualError(t, err, "trace: Padded: trace 1's blocks.1.attn.hook_pattern is [3 1 1], trace 0's [2 1 1]: maps must be [heads, queries, keys] with the same heads")
}

// Rows that are not a trace's positions from 0 are refused, not misplaced:
// a continued prompt, and logits of the last position only.
func TestPaddedRefusesRowsThatAreNotPositions(t *testing.T) {
	a, b := trace.New(), trace.New()
	a.Tokens, b.Tokens = []int32{1, 2, 3}, []int32{4, 5}
	a.Put("logits", &trace.Tensor{Shape: []int{3, 2}, Data: make([]float32, 6)})
	b.Put("logits", &trace.Tensor{Shape: []int{1, 2}, Data: make([]float32, 2)})
	_, _, err := trace.Padded([]*trace.Trace{a, b}, "logits")
	require.EqualError(t, err, "trace: Padded: trace 1: logits has 1 rows for 2 tokens: not a row a position (logits of the last position only? prefill with every position's: engine.LogitsAll, nb.AllLogits)")

	b.Put("logits", &trace.Tensor{Shape: []int{2, 2}, Data: make([]float32, 4)})
	_, rows, err := trace.Padded([]*trace.Trace{a, b}, "logits")
	require.NoError(t, err)
	require.Equal(t, []int{3, 2}, rows)

	b.Pos0 = 5
	_, _, err = trace.Padded([]*trace.Trace{a, b}, "logits")
	require.EqualError(t, err, "trace: Padded: trace 1: it continues a prompt from position 5: Padded stacks prompts prefilled from position 0")
}
