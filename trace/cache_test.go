package trace

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"
)

func randTensor(r *rand.Rand, shape ...int) *Tensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	x := &Tensor{Shape: shape, Data: make([]float32, n)}
	for i := range x.Data {
		x.Data[i] = float32(r.NormFloat64())
	}
	return x
}

// smallTrace is a 2-layer trace of T=3 tokens, d_model 4, 2 heads of 3,
// with the points the typed accessors read, filled with random values.
func smallTrace(seed uint64) *Trace {
	r := rand.New(rand.NewPCG(seed, 2))
	tr := New()
	tr.Model = Model{Layers: 2, DModel: 4, Heads: 2, KVHeads: 1, HeadDim: 3}
	tr.Tokens = []int32{5, 6, 5}
	tr.Put("hook_embed", randTensor(r, 3, 4))
	for l := range 2 {
		tr.Put(LayerPoint(l, "attn.hook_z"), randTensor(r, 3, 2, 3))
		tr.Put(LayerPoint(l, "attn.hook_k"), randTensor(r, 3, 1, 3))
		tr.Put(LayerPoint(l, "attn.hook_pattern"), randTensor(r, 2, 3, 3))
		tr.Put(LayerPoint(l, "hook_attn_out"), randTensor(r, 3, 4))
		tr.Put(LayerPoint(l, "hook_mlp_out"), randTensor(r, 3, 4))
		tr.Put(LayerPoint(l, "hook_resid_post"), randTensor(r, 3, 4))
	}
	return tr
}

func TestHeadSlicesMatchAt(t *testing.T) {
	tr := smallTrace(1)
	for _, name := range []string{"z", "hook_z", "attn.hook_z", "blocks.1.attn.hook_z"} {
		z, err := tr.Head(name, 1, 1)
		require.NoError(t, err)
		require.Equal(t, 3, z.Rows)
		require.Equal(t, 3, z.Cols)
		full := tr.Tensor("blocks.1.attn.hook_z")
		d := z.Dense()
		rows := z.Slices()
		for p := range 3 {
			for k := range 3 {
				require.Equal(t, full.At(p, 1, k), z.At(p, k))
				require.Equal(t, float64(full.At(p, 1, k)), d.At(p, k))
				require.Equal(t, full.At(p, 1, k), rows[p][k])
			}
		}
	}
	p, err := tr.Pattern(0, 1)
	require.NoError(t, err)
	full := tr.Tensor("blocks.0.attn.hook_pattern")
	for q := range 3 {
		for k := range 3 {
			require.Equal(t, full.At(1, q, k), p.At(q, k))
		}
	}
	// A copy: changing it leaves the trace alone.
	p.Data[0] = 42
	require.NotEqual(t, float32(42), full.At(1, 0, 0))

	_, err = tr.Head("k", 0, 1)
	require.ErrorContains(t, err, "has 1 heads")
	_, err = tr.Head("q", 0, 0)
	require.ErrorContains(t, err, `nb.Capture("blocks.*.attn.hook_q")`)
	_, err = tr.Head("blocks.1.attn.hook_z", 0, 1)
	require.ErrorContains(t, err, "another layer's point")
	_, err = tr.Head("result", 0, 0)
	require.EqualError(t, err, `trace: Head("result", ...): attn.hook_result is not a per-head point; Head takes z, q, k, v, rot_q, rot_k, pattern, attn_scores, cache_k and cache_v (a head's output in the residual stream is HeadResults)`)
}

// A layer the model does not have is out of range, not uncaptured: no
// capture could provide it, and TransformerLens's -1 is not the last.
func TestLayersOutOfRangeAreNamed(t *testing.T) {
	tr := smallTrace(1)
	_, err := tr.Get("blocks.2.hook_resid_post")
	require.EqualError(t, err, "trace: blocks.2.hook_resid_post: layer out of range: the model has 2 layers, 0 to 1")
	_, err = tr.Pattern(-1, 0)
	require.EqualError(t, err, "trace: blocks.-1.attn.hook_pattern: layer out of range: the model has 2 layers, 0 to 1; the last is 1, not -1")
	_, err = tr.Head("z", 2, 0)
	require.ErrorContains(t, err, "layer out of range")
	require.NotContains(t, err.Error(), "nb.Capture", "no capture provides a layer the model lacks")
	_, err = tr.Point("blocks.7.hook_mlp_out")
	require.ErrorContains(t, err, "layer out of range")
	// In range and not captured is still that.
	_, err = tr.Get("blocks.1.attn.hook_q")
	require.ErrorIs(t, err, ErrNotCaptured)
}

func TestResidReadsWhicheverEqualPointWasCaptured(t *testing.T) {
	tr := smallTrace(2)
	r0, err := tr.Resid(0)
	require.NoError(t, err)
	require.Equal(t, tr.Tensor("hook_embed").Data, r0.Data)
	r2, err := tr.Resid(2)
	require.NoError(t, err)
	require.Equal(t, "blocks.1.hook_resid_post", r2.Name)
	r1, err := tr.Resid(1)
	require.NoError(t, err)
	require.Equal(t, "blocks.0.hook_resid_post", r1.Name)
	require.Equal(t, tr.Tensor("blocks.0.hook_resid_post").Data[4:8], r1.Row(1))

	tr.Put("blocks.1.hook_resid_pre", &Tensor{Shape: []int{3, 4}, Data: make([]float32, 12)})
	r1, err = tr.Resid(1)
	require.NoError(t, err)
	require.Equal(t, "blocks.1.hook_resid_pre", r1.Name, "resid_pre first")

	_, err = tr.Resid(3)
	require.ErrorContains(t, err, "layers are 0..2")
	drop(tr, "blocks.1.hook_resid_post")
	_, err = tr.Resid(2)
	require.ErrorContains(t, err, `needs blocks.1.hook_resid_post, not captured; capture with nb.Capture("blocks.*.hook_resid_post")`)
}

// HeadResults against gonum: the heads' outputs summed are Z @ W_O^T, the
// attention output before any bias.
func TestHeadResultsSumToZTimesWO(t *testing.T) {
	tr := smallTrace(3)
	r := rand.New(rand.NewPCG(9, 9))
	wO := randTensor(r, 4, 6).Data
	res, err := tr.HeadResults(1, wO)
	require.NoError(t, err)
	require.Equal(t, []int{3, 2, 4}, res.Shape)

	z := tr.Tensor("blocks.1.attn.hook_z")
	zd, wd := mat.NewDense(3, 6, f64(z.Data)), mat.NewDense(4, 6, f64(wO))
	var want mat.Dense
	want.Mul(zd, wd.T())
	for p := range 3 {
		for i := range 4 {
			sum := float64(res.At(p, 0, i)) + float64(res.At(p, 1, i))
			// float32 dot products of 3 terms of magnitude ~1: error ~1e-6.
			require.InDelta(t, want.At(p, i), sum, 1e-5)
		}
	}
	// Head 1 alone: z[:, 1, :] @ W_O[:, 3:6]^T.
	for p := range 3 {
		for i := range 4 {
			var s float64
			for k := range 3 {
				s += float64(z.At(p, 1, k)) * float64(wO[i*6+3+k])
			}
			require.InDelta(t, s, float64(res.At(p, 1, i)), 1e-5)
		}
	}
	_, err = tr.HeadResults(1, wO[:5])
	require.ErrorContains(t, err, "not [d_model, 6]")
}

func f64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

func TestStacksSumAndNormalise(t *testing.T) {
	tr := smallTrace(4)
	// Make resid_post of the last layer the sum of the decomposition, as
	// a real run's is.
	final := tr.Tensor("blocks.1.hook_resid_post")
	for i := range final.Data {
		final.Data[i] = tr.Tensor("hook_embed").Data[i]
		for l := range 2 {
			final.Data[i] += tr.Tensor(LayerPoint(l, "hook_attn_out")).Data[i] + tr.Tensor(LayerPoint(l, "hook_mlp_out")).Data[i]
		}
	}
	dec, err := tr.DecomposeResid()
	require.NoError(t, err)
	require.Equal(t, []string{"embed", "0_attn_out", "0_mlp_out", "1_attn_out", "1_mlp_out"}, dec.Labels)
	acc, err := tr.AccumulatedResid()
	require.NoError(t, err)
	require.Equal(t, []string{"0_pre", "1_pre", "final_post"}, acc.Labels)

	gain := []float32{1, 2, 0.5, -1}
	const eps = 1e-6
	fm, err := tr.Resid(2)
	require.NoError(t, err)
	normed, err := dec.ApplyFinalNorm(fm, gain, eps)
	require.NoError(t, err)
	dir := []float32{0.3, -1, 2, 0.7}
	for p := range 3 {
		// The final RMSNorm by hand, then its logit along dir.
		var ss float64
		for i := range 4 {
			ss += float64(final.At(p, i)) * float64(final.At(p, i))
		}
		inv := 1 / math.Sqrt(ss/4+eps)
		var want float64
		for i := range 4 {
			want += float64(final.At(p, i)) * inv * float64(gain[i]) * float64(dir[i])
		}
		got, err := normed.Dot(dir, p)
		require.NoError(t, err)
		var sum float64
		for _, v := range got {
			sum += v
		}
		// Five float32 components of magnitude ~1, each rounded once.
		require.InDelta(t, want, sum, 1e-5, "position %d", p)
	}
	last, err := normed.Dot(dir, -1)
	require.NoError(t, err)
	at2, _ := normed.Dot(dir, 2)
	require.Equal(t, at2, last)
	_, err = normed.Dot(dir, 3)
	require.ErrorContains(t, err, "outside")

	heads, err := tr.StackHeadResults([][]float32{make([]float32, 24), make([]float32, 24)})
	require.NoError(t, err)
	require.Equal(t, []string{"L0H0", "L0H1", "L1H0", "L1H1"}, heads.Labels)

	drop(tr, "blocks.1.hook_mlp_out")
	_, err = tr.DecomposeResid()
	require.ErrorContains(t, err, `nb.Capture("blocks.*.hook_mlp_out")`)
}

// drop forgets a capture, as if it had not been captured.
func drop(tr *Trace, name string) {
	delete(tr.tensors, name)
	delete(tr.shapes, name)
	tr.Names = slices.DeleteFunc(tr.Names, func(n string) bool { return n == name })
}

// An index out of range names itself instead of reading another element:
// (2, 5) of a 5 x 5 matrix is (3, 0) in memory, and four coordinates on a
// three-dimensional tensor were read as its first three.
func TestAtRefusesWhatIsOutOfRange(t *testing.T) {
	x := randTensor(rand.New(rand.NewPCG(1, 2)), 8, 5, 5)
	require.Equal(t, x.Data[(1*5+2)*5+3], x.At(1, 2, 3))
	require.PanicsWithValue(t, "trace: At[0 2 5] on a tensor of shape [8 5 5]: coordinate 2 is 5, out of range 0..4", func() { x.At(0, 2, 5) })
	require.PanicsWithValue(t, "trace: At[0 0 0 0] on a tensor of shape [8 5 5]: want 3 coordinates, one per dimension", func() { x.At(0, 0, 0, 0) })
	require.Panics(t, func() { x.At(0, 0) })
	require.Panics(t, func() { x.At(-1, 0, 0) })
	m := &Matrix{Name: "blocks.1.attn.hook_pattern head 3", Rows: 5, Cols: 5, Data: x.Data[:25]}
	require.Equal(t, x.Data[13], m.At(2, 3))
	require.PanicsWithValue(t, "trace: blocks.1.attn.hook_pattern head 3: At(2, 5) is out of range: the matrix is 5 x 5", func() { m.At(2, 5) })
	require.Panics(t, func() { m.At(3, -1) })
	require.PanicsWithValue(t, "trace: blocks.1.attn.hook_pattern head 3: row 5 is out of range: the matrix has 5 rows", func() { m.Row(5) })
}
