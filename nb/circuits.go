package nb

import (
	"errors"
	"fmt"
	"math"
	"math/cmplx"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"

	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/trace"
)

// HeadWeights are one attention head's matrices as TransformerLens names
// them, in its row-vector convention (x times W): Q, K and V are
// [d_model, d_head], O is [d_head, d_model]; K and V are the key/value head
// the query head shares (GQA). The pre-attention norm is folded in as
// TransformerLens's fold_ln does: its gain scales Q, K and V's rows, and a
// LayerNorm's centring is taken out of their columns. Qwen3's per-head
// Q/K norm gain scales Q's and K's columns. What is not linear is left out,
// as TransformerLens's circuits leave it: the norms' divisions, RoPE and
// biases.
type HeadWeights struct {
	Q, K, V, O *mat.Dense
}

// HeadWeights returns head's matrices in layer (see the type).
func (m *Model) HeadWeights(layer, head int) HeadWeights {
	m.ready()
	c := &m.engine().Model.Config
	if layer < 0 || layer >= c.Layers {
		panic(fmt.Errorf("nb.HeadWeights: layer %d: the model has %d layers (0-%d)", layer, c.Layers, c.Layers-1))
	}
	if head < 0 || head >= c.Heads {
		panic(fmt.Errorf("nb.HeadWeights: head %d: the model has %d heads (0-%d)", head, c.Heads, c.Heads-1))
	}
	o := m.engine().Model.Blocks[layer].O
	return m.headWeights(layer, head, m.decode("HeadWeights", o, 0, o.Rows))
}

// headWeights is HeadWeights with the layer's W_O decoded, [d_model][heads*d_head].
func (m *Model) headWeights(layer, head int, o []float32) HeadWeights {
	c := &m.engine().Model.Config
	b := &m.engine().Model.Blocks[layer]
	var qGain, kGain []float32
	if c.QKNorm {
		qGain, kGain = b.QNorm, b.KNorm
	}
	v, wO := m.ov(layer, head, o)
	kv := head / (c.Heads / c.KVHeads)
	return HeadWeights{Q: m.reading(layer, b.Q, head, qGain), K: m.reading(layer, b.K, kv, kGain), V: v, O: wO}
}

// ov is a head's W_V and W_O: all that composing with its output needs.
func (m *Model) ov(layer, head int, o []float32) (v, wO *mat.Dense) {
	c := &m.engine().Model.Config
	return m.reading(layer, m.engine().Model.Blocks[layer].V, head/(c.Heads/c.KVHeads), nil), m.headOut(layer, head, o)
}

// headOut is a head's W_O, [d_head, d_model], from its layer's decoded
// output projection o, [d_model][heads*d_head].
func (m *Model) headOut(layer, head int, o []float32) *mat.Dense {
	c := &m.engine().Model.Config
	hd, cols := c.HeadDim, m.engine().Model.Blocks[layer].O.Cols
	wO := mat.NewDense(hd, c.DModel, nil)
	for i := range hd {
		for j := range c.DModel {
			wO.Set(i, j, float64(o[j*cols+head*hd+i]))
		}
	}
	return wO
}

// reading is head h's rows of w, a projection that reads the residual
// stream, as [d_model, d_head] with the layer's norm folded in (see
// HeadWeights) and its columns scaled by outGain when given.
func (m *Model) reading(layer int, w *model.Weight, h int, outGain []float32) *mat.Dense {
	c := &m.engine().Model.Config
	gain, hd := m.engine().Model.Blocks[layer].AttnNorm, c.HeadDim
	rows := m.decode("HeadWeights", w, h*hd, (h+1)*hd) // [d_head][d_model]
	x := mat.NewDense(c.DModel, hd, nil)
	for i := range hd {
		for j := range c.DModel {
			v := float64(rows[i*c.DModel+j]) * float64(gain[j])
			if outGain != nil {
				v *= float64(outGain[i])
			}
			x.Set(j, i, v)
		}
	}
	if c.Norm == model.NormLayer {
		// The norm's output has mean 0 over d_model, so the part of each
		// column along (1, ..., 1) reads nothing.
		for i := range hd {
			col := mat.Col(nil, i, x)
			mean := floats.Sum(col) / float64(len(col))
			for j := range col {
				x.Set(j, i, col[j]-mean)
			}
		}
	}
	return x
}

// Composition names what of a later head an earlier head's output feeds.
type Composition int

const (
	QComposition Composition = iota // its queries
	KComposition                    // its keys
	VComposition                    // its values
)

func (c Composition) String() string {
	switch c {
	case QComposition:
		return "Q-composition"
	case KComposition:
		return "K-composition"
	case VComposition:
		return "V-composition"
	}
	return fmt.Sprintf("Composition(%d)", int(c))
}

// CompositionScores scores how much of what each head of the layers before
// layer writes, head (layer, head) reads through its queries, keys or
// values: TransformerLens's composition score ||W_OV·W||_F / (||W_OV||_F
// ||W||_F), with the earlier head's W_OV = W_V W_O and the later head's W =
// W_Q W_K^T (Q), its transpose (K) or its W_OV (V), from HeadWeights. Row l
// of the result is layer l's heads; there are layer rows. Even unrelated
// heads score above 0: read the scores against one another.
func (m *Model) CompositionScores(layer, head int, kind Composition) trace.Scores {
	m.ready()
	if kind < QComposition || kind > VComposition {
		panic(fmt.Errorf("nb.CompositionScores: %v is not Q-, K- or V-composition", kind))
	}
	if layer == 0 {
		panic(errors.New("nb.CompositionScores: layer 0 has no earlier heads to compose with: choose a later layer"))
	}
	dst := m.HeadWeights(layer, head)
	// The later head's W = A B with A [d_model, d_head] and B [d_head, d_model].
	a, b := dst.Q, dst.K.T()
	switch kind {
	case KComposition:
		a, b = dst.K, dst.Q.T()
	case VComposition:
		a, b = dst.V, dst.O
	}
	gramA, gramB := gram(a, false), gram(b, true)
	normW := math.Sqrt(traceOfProduct(gramA, gramB))
	out := make(trace.Scores, layer)
	for l := range out {
		out[l] = make([]float64, m.engine().Model.Heads)
		o := m.engine().Model.Blocks[l].O
		wO := m.decode("CompositionScores", o, 0, o.Rows)
		for h := range out[l] {
			srcV, srcO := m.ov(l, h, wO)
			// ||V O A B||^2 = tr(M^T (V^T V) M (B B^T)) with M = O A, all
			// [d_head, d_head]: nothing of d_model x d_model is made.
			var mid, left mat.Dense
			mid.Mul(srcO, a)
			gramV, gramO := gram(srcV, false), gram(srcO, true)
			left.Mul(gramV, &mid)
			var both mat.Dense
			both.Mul(mid.T(), &left)
			product := math.Sqrt(traceOfProduct(&both, gramB))
			normOV := math.Sqrt(traceOfProduct(gramV, gramO))
			out[l][h] = product / (normOV * normW)
		}
	}
	return out
}

// gram is x^T x, or x x^T when rows.
func gram(x mat.Matrix, rows bool) *mat.Dense {
	var g mat.Dense
	if rows {
		g.Mul(x, x.T())
	} else {
		g.Mul(x.T(), x)
	}
	return &g
}

// traceOfProduct is tr(a b) for square a and b of one size.
func traceOfProduct(a, b mat.Matrix) float64 {
	n, _ := a.Dims()
	var s float64
	for i := range n {
		for j := range n {
			s += a.At(i, j) * b.At(j, i)
		}
	}
	return s
}

// CopyingScores scores, for every head, how much its full OV circuit
// copies: what attending to a token does to the logit of each token, W_E
// W_V W_O W_U (vocab x vocab, TransformerLens's model.OV with W_E and W_U
// around it), as the sum of its eigenvalues over the sum of their absolute
// values (Elhage et al., "A Mathematical Framework for Transformer
// Circuits"). Near 1, attending to a token raises that token's logit, as an
// induction head's does; near -1 it lowers it. W_V and W_O are
// HeadWeights'; W_E is the token embedding with the architecture's scale
// (Gemma's sqrt(d_model)), without positions; W_U is the LM head with the
// final norm folded in as HeadWeights folds the others, and centred over the
// vocabulary as TransformerLens's center_unembed does by default: a
// direction that raises every logit alike changes no probability, so it is
// not copying. The eigenvalues are
// those of W_O (W_U W_E) W_V, [d_head, d_head], which has the same non-zero
// ones: W_U W_E is made once, vocab x d_model^2 multiply-adds, and each
// key/value head's W_U W_E W_V. On a random model of bonsai-1.7b's shape
// (151,936 tokens, d_model 2,048, 28 x 16 heads) that took 2.1 minutes on 2
// cores and 340 MB.
func (m *Model) CopyingScores() trace.Scores {
	m.ready()
	c := &m.engine().Model.Config
	ue := m.unembedEmbed()
	out := make(trace.Scores, c.Layers)
	for l := range out {
		out[l] = make([]float64, c.Heads)
		o := m.engine().Model.Blocks[l].O
		wO := m.decode("CopyingScores", o, 0, o.Rows)
		ueV := make([]*mat.Dense, c.KVHeads) // W_U W_E W_V of each key/value head
		for h := range out[l] {
			v, wo := m.ov(l, h, wO)
			kv := h / (c.Heads / c.KVHeads)
			if ueV[kv] == nil {
				ueV[kv] = new(mat.Dense)
				ueV[kv].Mul(ue, v)
			}
			var circuit mat.Dense
			circuit.Mul(wo, ueV[kv])
			var eig mat.Eigen
			if !eig.Factorize(&circuit, mat.EigenNone) {
				panic(fmt.Errorf("nb.CopyingScores: the eigenvalues of layer %d head %d's OV circuit did not converge", l, h))
			}
			var sum, abs float64
			for _, e := range eig.Values(nil) {
				sum += real(e)
				abs += cmplx.Abs(e)
			}
			if abs > 0 {
				out[l][h] = sum / abs
			}
		}
	}
	return out
}

// unembedEmbed is W_U W_E, [d_model, d_model] (see CopyingScores), summed
// over the vocabulary a block of tokens at a time, so that neither is
// decoded whole.
func (m *Model) unembedEmbed() *mat.Dense {
	c := &m.engine().Model.Config
	d, scale := c.DModel, float64(c.EmbedScale)
	if scale == 0 {
		scale = 1
	}
	sum := mat.NewDense(d, d, nil)
	eSum, uSum := make([]float64, d), make([]float64, d)
	const block = 1024
	for lo := 0; lo < c.Vocab; lo += block {
		hi := min(lo+block, c.Vocab)
		e := m.decode("CopyingScores", m.engine().Model.Embed, lo, hi)
		u := e
		if m.engine().Model.Output != m.engine().Model.Embed {
			u = m.decode("CopyingScores", m.engine().Model.Output, lo, hi)
		}
		// W_E a token a row, W_U a token a column: gonum multiplied a
		// transposed operand 4.8x slower (2.7 against 12.7 GFLOP/s here).
		we, wu := mat.NewDense(hi-lo, d, nil), mat.NewDense(d, hi-lo, nil)
		row := make([]float64, d)
		for t := range hi - lo {
			for i := range d {
				we.Set(t, i, scale*float64(e[t*d+i]))
				row[i] = float64(u[t*d+i]) * float64(m.engine().Model.OutNorm[i])
			}
			if c.Norm == model.NormLayer {
				// As in reading: the norm's output has mean 0 over d_model.
				floats.AddConst(-floats.Sum(row)/float64(d), row)
			}
			wu.SetCol(t, row)
			floats.Add(uSum, row)
			floats.Add(eSum, we.RawRowView(t))
		}
		var part mat.Dense
		part.Mul(wu, we)
		sum.Add(sum, &part)
	}
	// Centring W_U's rows over the vocabulary takes (sum of u)(sum of e)^T / vocab.
	var shift mat.Dense
	shift.Outer(-1/float64(c.Vocab), mat.NewVecDense(d, uSum), mat.NewVecDense(d, eSum))
	sum.Add(sum, &shift)
	return sum
}
