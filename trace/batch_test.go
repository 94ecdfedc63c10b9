package trace_test

import (
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
