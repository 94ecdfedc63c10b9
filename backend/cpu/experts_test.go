package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/internal/enginetest"
)

// MatMulExperts gives each run's rows x W[expert]^T, against float64 sums,
// for runs in another order than the experts', an empty run and an expert no
// run takes; each output is a float32 sum of at most 288 products, so 1e-5
// of sum |products| bounds its rounding with room (288 x 2^-24 is 1.7e-5 at
// worst, about sqrt(288) x 2^-24 in practice). Bad runs are named errors.
func TestMatMulExpertsAgainstFloat64(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 5))
	b := New(2)
	cols, experts := 288, 4
	counts := []int{20, 0, 3, 40}
	var gates, ups []backend.Matrix
	var decoded [2][][]float32
	for e := range experts {
		for p, n := range []int{24, 10} {
			w, values := enginetest.RandomWeight(t, r, fmt.Sprintf("w%d/%d", e, p), n, cols, gguf.Q8_0)
			m, err := b.Upload(w)
			require.NoError(t, err)
			decoded[p] = append(decoded[p], values)
			if p == 0 {
				gates = append(gates, m)
			} else {
				ups = append(ups, m)
			}
		}
	}
	var runs []backend.ExpertRun
	rows := 0
	for _, e := range []int{3, 1, 0, 2} {
		runs = append(runs, backend.ExpertRun{Expert: e, First: rows, Rows: counts[e]})
		rows += counts[e]
	}
	xs := make([]float32, rows*cols)
	for i := range xs {
		xs[i] = float32(r.NormFloat64())
	}
	st := b.NewStream()
	x, err := st.Alloc("x", len(xs))
	require.NoError(t, err)
	st.Write(x, 0, xs)
	y0, err := st.Alloc("gate", rows*24)
	require.NoError(t, err)
	y1, err := st.Alloc("up", rows*10)
	require.NoError(t, err)
	st.MatMulExperts(x, runs, backend.ExpertProj{W: gates, Dst: y0}, backend.ExpertProj{W: ups, Dst: y1})
	require.NoError(t, st.Sync())
	for p, y := range []backend.Tensor{y0, y1} {
		got := data(y)
		n := len(got) / rows
		for _, run := range runs {
			for m := run.First; m < run.First+run.Rows; m++ {
				for j := range n {
					var want, mag float64
					for k := range cols {
						v := float64(xs[m*cols+k]) * float64(decoded[p][run.Expert][j*cols+k])
						want, mag = want+v, mag+math.Abs(v)
					}
					require.LessOrEqual(t, math.Abs(float64(got[m*n+j])-want), 1e-5*mag, "projection %d, expert %d, row %d, output %d", p, run.Expert, m, j)
				}
			}
		}
	}
	y, err := st.Alloc("y", rows*24)
	require.NoError(t, err)
	for _, c := range []struct {
		run  backend.ExpertRun
		want string
	}{
		{backend.ExpertRun{Expert: 4, First: 0, Rows: 1}, "cpu: experts' matmul: run of expert 4, where projection 0 has 4 experts"},
		{backend.ExpertRun{Expert: 0, First: rows - 1, Rows: 2}, fmt.Sprintf("cpu: experts' matmul: expert 0's rows %d..%d are outside x's %d rows", rows-1, rows+1, rows)},
		{backend.ExpertRun{Expert: 0, First: -1, Rows: 1}, fmt.Sprintf("cpu: experts' matmul: expert 0's rows -1..0 are outside x's %d rows", rows)},
	} {
		st.MatMulExperts(x, []backend.ExpertRun{c.run}, backend.ExpertProj{W: gates, Dst: y})
		require.EqualError(t, st.Sync(), c.want)
	}
}
