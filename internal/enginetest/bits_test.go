package enginetest

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// recorder is a require.TestingT that notes a failure instead of stopping.
type recorder struct{ failed bool }

func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) FailNow()              { r.failed = true; panic(r) }

func failsOn(want, got []float32) (failed bool) {
	r := &recorder{}
	defer func() {
		if p := recover(); p != nil && p != r {
			panic(p)
		}
		failed = r.failed
	}()
	RequireBits(r, want, got)
	return false
}

func TestRequireBitsTellsSignedZerosAndNaNsApart(t *testing.T) {
	nan := float32(math.NaN())
	negZero := float32(math.Copysign(0, -1))
	require.False(t, failsOn([]float32{1, nan, 0}, []float32{1, nan, 0}), "the same bits, NaN included")
	require.True(t, failsOn([]float32{1, 0}, []float32{1, negZero}), "-0 is not +0")
	require.True(t, failsOn([]float32{1, 2}, []float32{1, 2.0000002}), "one ulp")
	require.True(t, failsOn([]float32{1, 2}, []float32{1}), "lengths")
	require.Equal(t, []float32{0}, []float32{negZero}, "what require.Equal would have passed")
}
