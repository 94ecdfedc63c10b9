package viz

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/mat"
)

// principal returns the first k principal directions of n rows of width d
// (row(i) gives row i), the variance along each, the total variance and the
// rows' mean, which the directions are centred on. A full SVD of a capture's
// hidden states (layers x positions rows, d_model columns) took minutes for
// a bonsai-8b-shape trace of 64 tokens; subspace iteration on a block of a
// few more vectors than k takes a few passes over the rows, each shared out
// over the cores.
func principal(row func(i int) []float32, n, d, k int) (dirs [][]float64, vars []float64, total float64, mean []float64) {
	mean = make([]float64, d)
	for i := range n {
		for j, v := range row(i) {
			mean[j] += float64(v)
		}
	}
	for j := range mean {
		mean[j] /= float64(n)
	}
	b := min(k+6, d, n)
	q := mat.NewDense(d, b, nil)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range d {
		for j := range b {
			q.Set(i, j, r.NormFloat64())
		}
	}
	orthonormalize(q)
	c := centred{row: row, mean: mean, n: n, d: d}
	var y *mat.Dense
	// 20 passes: the error of the k-th direction shrinks as (var_{b+1} /
	// var_k)^passes; directions closer than that the plot cannot tell apart.
	for range 20 {
		y = c.times(q)
		q = c.transposeTimes(y)
		orthonormalize(q)
	}
	// Rayleigh-Ritz: the variances and directions within the subspace.
	y = c.times(q)
	var gram mat.SymDense
	gram.SymOuterK(1, y.T())
	var eig mat.EigenSym
	if !eig.Factorize(&gram, true) {
		return nil, nil, 0, nil
	}
	vals := eig.Values(nil)
	var w mat.Dense
	eig.VectorsTo(&w)
	order := make([]int, b)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, c int) int { return cmp.Compare(vals[c], vals[a]) }) // largest first
	for _, o := range order[:min(k, b)] {
		dir := make([]float64, d)
		for i := range d {
			for j := range b {
				dir[i] += q.At(i, j) * w.At(j, o)
			}
		}
		dirs = append(dirs, dir)
		vars = append(vars, math.Max(vals[o], 0)/float64(n-1))
	}
	for i := range n {
		for j, v := range row(i) {
			x := float64(v) - mean[j]
			total += x * x
		}
	}
	return dirs, vars, total / float64(n-1), mean
}

// orthonormalize replaces q's columns with an orthonormal basis of them:
// Gram-Schmidt, twice, which is as good as a QR for a few columns and does
// not build QR's d x d matrix.
func orthonormalize(q *mat.Dense) {
	_, b := q.Dims()
	for range 2 {
		for j := range b {
			col := q.ColView(j).(*mat.VecDense)
			for i := range j {
				prev := q.ColView(i)
				col.AddScaledVec(col, -mat.Dot(prev, col), prev)
			}
			if norm := mat.Norm(col, 2); norm > 0 { // zero where the rows span fewer directions
				col.ScaleVec(1/norm, col)
			}
		}
	}
}

// centred is n rows of width d less their mean, multiplied a chunk of rows
// at a time in float64 through gonum's parallel GEMM.
type centred struct {
	row    func(int) []float32
	mean   []float64
	n, d   int
	chunks []*mat.Dense // kept when they fit keepBytes
}

// keepBytes bounds the float64 copy of the rows kept between passes.
const keepBytes = 512 << 20

func (c *centred) chunk(lo, hi int) *mat.Dense {
	m := mat.NewDense(hi-lo, c.d, nil)
	for i := lo; i < hi; i++ {
		out := m.RawRowView(i - lo)
		for j, v := range c.row(i) {
			out[j] = float64(v) - c.mean[j]
		}
	}
	return m
}

// each calls fn with every chunk of rows and its first row.
func (c *centred) each(fn func(lo int, m *mat.Dense)) {
	size := max(1, (32<<20)/(8*c.d))
	keep := c.n*c.d*8 <= keepBytes
	for k, lo := 0, 0; lo < c.n; k, lo = k+1, lo+size {
		if keep && k < len(c.chunks) {
			fn(lo, c.chunks[k])
			continue
		}
		m := c.chunk(lo, min(lo+size, c.n))
		if keep {
			c.chunks = append(c.chunks, m)
		}
		fn(lo, m)
	}
}

// times is (X - mean) q: n x b.
func (c *centred) times(q *mat.Dense) *mat.Dense {
	_, b := q.Dims()
	y := mat.NewDense(c.n, b, nil)
	c.each(func(lo int, m *mat.Dense) {
		rows, _ := m.Dims()
		y.Slice(lo, lo+rows, 0, b).(*mat.Dense).Mul(m, q)
	})
	return y
}

// transposeTimes is (X - mean)^T y: d x b.
func (c *centred) transposeTimes(y *mat.Dense) *mat.Dense {
	_, b := y.Dims()
	z := mat.NewDense(c.d, b, nil)
	var part mat.Dense
	c.each(func(lo int, m *mat.Dense) {
		rows, _ := m.Dims()
		part.Reset()
		part.Mul(m.T(), y.Slice(lo, lo+rows, 0, b))
		z.Add(z, &part)
	})
	return z
}
