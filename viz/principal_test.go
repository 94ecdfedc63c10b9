package viz

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/stat"
)

// The subspace iteration against gonum's full principal component analysis
// (an SVD), on rows drawn with standard deviations 10, 6, 3.5, 2 and 1 along
// random directions plus small noise, around a mean far from zero: the same
// first two directions (up to sign), variances and total variance, to 1e-9
// relative, since both are float64 and the spectrum has clear gaps.
func TestPrincipalMatchesFullPCA(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const n, d = 300, 64
	sd := []float64{10, 6, 3.5, 2, 1}
	axes := mat.NewDense(len(sd), d, nil)
	for i := range len(sd) {
		for j := range d {
			axes.Set(i, j, r.NormFloat64())
		}
	}
	rows := make([][]float32, n)
	data := mat.NewDense(n, d, nil)
	for i := range n {
		rows[i] = make([]float32, d)
		for j := range d {
			v := 50 + 0.01*r.NormFloat64()
			rows[i][j] = float32(v)
		}
		for a, s := range sd {
			c := s * r.NormFloat64()
			for j := range d {
				rows[i][j] += float32(c * axes.At(a, j) / math.Sqrt(float64(d)))
			}
		}
		for j := range d {
			data.Set(i, j, float64(rows[i][j]))
		}
	}
	dirs, vars, total, mean := principal(func(i int) []float32 { return rows[i] }, n, d, 2)
	require.Len(t, dirs, 2)

	var pc stat.PC
	require.True(t, pc.PrincipalComponents(data, nil))
	var vecs mat.Dense
	pc.VectorsTo(&vecs)
	want := pc.VarsTo(nil)
	wantTotal := 0.0
	for _, v := range want {
		wantTotal += v
	}
	require.InEpsilon(t, wantTotal, total, 1e-9)
	for k := range 2 {
		require.InEpsilon(t, want[k], vars[k], 1e-9, "variance %d", k)
		dot := 0.0
		for j := range d {
			dot += dirs[k][j] * vecs.At(j, k)
		}
		require.InDelta(t, 1, math.Abs(dot), 1e-9, "direction %d", k)
	}
	for j := range d {
		require.InDelta(t, stat.Mean(mat.Col(nil, j, data), nil), mean[j], 1e-9)
	}
}

// A bonsai-8b-shape capture of 64 tokens: 37 stages x 64 rows of width
// 4096. The full SVD took minutes here; this must not.
func BenchmarkPrincipal(b *testing.B) {
	const n, d = 37 * 64, 4096
	r := rand.New(rand.NewPCG(5, 6))
	x := make([]float32, n*d)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	for range b.N {
		principal(func(i int) []float32 { return x[i*d : (i+1)*d] }, n, d, 2)
	}
}
