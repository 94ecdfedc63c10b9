package enginetest

import (
	"fmt"
	"math"

	"github.com/stretchr/testify/require"
)

// RequireBits fails t unless got holds want's float32s bit for bit.
// require.Equal compares floats with ==, which takes -0 for +0 and no NaN
// for itself.
func RequireBits(t require.TestingT, want, got []float32, msgAndArgs ...any) {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	if len(got) != len(want) {
		require.Fail(t, fmt.Sprintf("%d elements, want %d", len(got), len(want)), msgAndArgs...)
		return
	}
	for i := range want {
		if g, w := math.Float32bits(got[i]), math.Float32bits(want[i]); g != w {
			require.Fail(t, fmt.Sprintf("[%d] of %d is %g (%#08x), want %g (%#08x)", i, len(want), got[i], g, want[i], w), msgAndArgs...)
			return
		}
	}
}

// bitsDiffer is RequireBits as an error, for a goroutine other than the
// test's.
func bitsDiffer(want, got []float32) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d elements, want %d", len(got), len(want))
	}
	for i := range want {
		if g, w := math.Float32bits(got[i]), math.Float32bits(want[i]); g != w {
			return fmt.Errorf("[%d] of %d is %g (%#08x), want %g (%#08x)", i, len(want), got[i], g, want[i], w)
		}
	}
	return nil
}
