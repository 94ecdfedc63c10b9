package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The AVX-512 softmax against float64, on rows around its 16 lanes, with
// masked (-Inf) entries and scores spread wide enough that some
// exponentials leave float32's normal range. Cephes' expf is within about
// 1 float32 rounding (2^-24) of exp; the scaling by 1/sum and the sum's
// rounding add about 2 more, and the shift x - m, rounded to float32 as the
// scalar softmax rounds it too, adds |x - m| roundings: (4 + |x - m|)
// roundings of the value bound each entry, plus the smallest normal
// float32 for entries flushed to 0. -Inf entries must be exactly 0, and
// -Inf padding at either end (in multiples of 16, as attention's rows start
// at multiples of 256) must not change a bit of the rest.
func TestVectorSoftmaxIsSoftmax(t *testing.T) {
	if !hasVectorSoftmax {
		t.Skip("this CPU has no AVX-512 (or is not amd64): the vector softmax is not used")
	}
	r := rand.New(rand.NewPCG(5, 6))
	negInf := float32(math.Inf(-1))
	for _, n := range []int{1, 2, 15, 16, 17, 31, 33, 100, 513} {
		for _, spread := range []float64{1, 30} {
			t.Run(fmt.Sprintf("n=%d/spread=%v", n, spread), func(t *testing.T) {
				x := make([]float32, n)
				for i := range x {
					x[i] = float32(spread * r.NormFloat64())
					if n > 1 && r.IntN(5) == 0 {
						x[i] = negInf
					}
				}
				if n > 1 {
					x[r.IntN(n)] = 3 // at least one finite
				}
				got := make([]float32, n)
				softmax(got, x)
				m := math.Inf(-1)
				for _, v := range x {
					m = max(m, float64(v))
				}
				var sum float64
				for _, v := range x {
					sum += math.Exp(float64(v) - m)
				}
				for i, v := range x {
					want := math.Exp(float64(v)-m) / sum
					if v == negInf {
						require.Zero(t, math.Float32bits(got[i]), "entry %d is -Inf: exactly +0", i)
						continue
					}
					require.InDelta(t, want, float64(got[i]), (4+m-float64(v))*0x1p-24*want+0x1p-126, "entry %d of %d", i, n)
				}

				padded := make([]float32, 32+n+21)
				for i := range padded {
					padded[i] = negInf
				}
				copy(padded[32:], x)
				out := make([]float32, len(padded))
				softmax(out, padded)
				require.Equal(t, got, out[32:32+n], "padded with -Inf")
				softmax(x, x)
				require.Equal(t, got, x, "in place")
			})
		}
	}
}

// RMSNorm against float64 written plainly, on row lengths around the
// vector kernel's 16 lanes (its tail masks): an output is x*(1/root)*g,
// three float32 roundings of the float64 value after root's (itself
// within 2^-24 relative), so within 4*2^-24 of |output|.
func TestRMSNormIsFloat64RMSNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	b := New(2)
	st := b.NewStream()
	for _, dim := range []int{1, 15, 16, 32, 37, 256} {
		const rows = 5
		x, g := make([]float32, rows*dim), make([]float32, dim)
		for i := range x {
			x[i] = float32(r.NormFloat64() * math.Exp(2*r.NormFloat64()))
		}
		for i := range g {
			g[i] = float32(r.NormFloat64())
		}
		out, err := st.Alloc("out", rows*dim)
		require.NoError(t, err)
		scale, err := st.Alloc("scale", rows)
		require.NoError(t, err)
		const eps = 1e-6
		st.RMSNorm(out, sliceOf(t, st, x), sliceOf(t, st, g), scale, rows, dim, eps)
		got, roots := make([]float32, rows*dim), make([]float32, rows)
		require.NoError(t, st.Read(out, 0, got))
		require.NoError(t, st.Read(scale, 0, roots))
		for row := range rows {
			var ss float64
			for _, v := range x[row*dim : (row+1)*dim] {
				ss += float64(v) * float64(v)
			}
			root := math.Sqrt(ss/float64(dim) + eps)
			require.InDelta(t, root, float64(roots[row]), root*math.Pow(2, -24), "dim %d row %d: root", dim, row)
			for i := range dim {
				want := float64(x[row*dim+i]) / root * float64(g[i])
				require.InDelta(t, want, float64(got[row*dim+i]), 4*math.Pow(2, -24)*math.Abs(want), "dim %d row %d element %d", dim, row, i)
			}
		}
	}
}

// Issue 47.12: a NaN score made the AVX-512 softmax's row differ from the
// scalar one's and the GPUs': VMAXPS keeps a lane's NaN only until the next
// vector, and the exponential's range check sent NaN to 0. A row holding a
// NaN anywhere (either end, lane edges, beside -Inf entries) is NaN in every
// entry, on whichever path this CPU takes; other rows are untouched.
func TestSoftmaxOfARowWithNaNIsNaN(t *testing.T) {
	nan, negInf := float32(math.NaN()), float32(math.Inf(-1))
	for _, n := range []int{1, 15, 16, 17, 33, 100} {
		for _, at := range []int{0, 15, 16, 31, n / 2, n - 1} {
			if at >= n {
				continue
			}
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(i%7) - 3
				if i%5 == 4 {
					x[i] = negInf
				}
			}
			x[at] = nan
			o := make([]float32, n)
			softmax(o, x)
			for i, v := range o {
				require.True(t, math.IsNaN(float64(v)), "n=%d, NaN at %d: entry %d is %v", n, at, i, v)
			}
			x[at] = 0
			softmax(o, x)
			for i, v := range o {
				require.False(t, math.IsNaN(float64(v)), "n=%d without NaN: entry %d is NaN", n, i)
			}
		}
	}
}
