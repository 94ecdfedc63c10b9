package nb_test

import (
	"fmt"
	"math"
	"math/cmplx"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/synth"
	"github.com/stratalab/strata/nb"
	"github.com/stratalab/strata/trace"
)

func openGenerated(t *testing.T, shape string) *nb.Model {
	w, err := synth.Generate(synth.Shapes[shape], gguf.F32, 5)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), shape+".gguf")
	f, err := os.Create(path)
	require.NoError(t, err)
	_, err = w.WriteTo(f)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	m, err := nb.TryOpen(path, nb.Backend("cpu"))
	require.NoError(t, err)
	return m
}

// HeadWeights are what the engine computes with: a position's residual
// stream divided by its norm's scale, times W_Q, W_K and W_V, is hook_q,
// hook_k and hook_v (less what the norm's bias and the projections' biases
// add, for GPT-2); each head's hook_z times its W_O adds up to
// hook_attn_out (less W_O's bias). Qwen3's hook_q and hook_k are that
// divided by the per-head norm's scale, whose gain W_Q and W_K hold.
func TestHeadWeightsAreWhatThePrefillMultipliesBy(t *testing.T) {
	for _, shape := range []string{"tiny-llama", "tiny-gpt2", "tiny-qwen3"} {
		t.Run(shape, func(t *testing.T) {
			m := openGenerated(t, shape)
			c := m.Config()
			tokens := []int32{72, 101, 108, 108, 111, 44, 32, 119}
			const layer = 1
			tr := m.Prefill(tokens, nb.Capture(trace.LayerPoint(layer, "*")))
			get := func(p trace.Point) []float32 { return nb.Must(tr.Get(trace.LayerPoint(layer, p))).Data }
			resid, scale := get("hook_resid_pre"), get("ln1.hook_scale")
			b := &m.Engine().Model.Blocks[layer]
			// What the folded weights leave out: the norm's bias through the
			// projection, and the projection's bias.
			offset := func(w *model.Weight, bias []float32, head int) []float64 {
				out := make([]float64, c.HeadDim)
				if b.AttnNormBias == nil && bias == nil {
					return out
				}
				rows := make([]float32, w.Rows*w.Cols)
				w.Format.Dequantize(rows, w.Data)
				for i := range out {
					r := head*c.HeadDim + i
					for j, v := range b.AttnNormBias {
						out[i] += float64(v) * float64(rows[r*w.Cols+j])
					}
					if bias != nil {
						out[i] += float64(bias[r])
					}
				}
				return out
			}
			group := c.Heads / c.KVHeads
			for h := range c.Heads {
				hw := m.HeadWeights(layer, h)
				for _, p := range []struct {
					point trace.Point
					w     *mat.Dense
					heads int
					head  int
					off   []float64
				}{
					{"attn.hook_q", hw.Q, c.Heads, h, offset(b.Q, b.QBias, h)},
					{"attn.hook_k", hw.K, c.KVHeads, h / group, offset(b.K, b.KBias, h/group)},
					{"attn.hook_v", hw.V, c.KVHeads, h / group, offset(b.V, b.VBias, h/group)},
				} {
					got := get(p.point)
					gain := map[trace.Point][]float32{"attn.hook_q": b.QNorm, "attn.hook_k": b.KNorm}[p.point]
					for pos := range tokens {
						want := make([]float64, c.HeadDim)
						for i := range want {
							want[i] = p.off[i]
							for j := range c.DModel {
								want[i] += float64(resid[pos*c.DModel+j]) / float64(scale[pos]) * p.w.At(j, i)
							}
						}
						if c.QKNorm && gain != nil {
							var ss float64
							for i, v := range want {
								ss += (v / float64(gain[i])) * (v / float64(gain[i]))
							}
							rms := math.Sqrt(ss/float64(c.HeadDim) + float64(c.NormEps))
							for i := range want {
								want[i] /= rms
							}
						}
						for i, w := range want {
							// float32 sums of d_model terms of size ~1 against float64.
							require.InDelta(t, w, got[(pos*p.heads+p.head)*c.HeadDim+i], 1e-4, "%s pos %d dim %d", p.point, pos, i)
						}
					}
				}
			}
			z, out := get("attn.hook_z"), get("hook_attn_out")
			heads := make([]*mat.Dense, c.Heads)
			for h := range heads {
				heads[h] = m.HeadWeights(layer, h).O
			}
			for pos := range tokens {
				for j := range c.DModel {
					var want float64
					if b.OBias != nil {
						want = float64(b.OBias[j])
					}
					for h, o := range heads {
						for i := range c.HeadDim {
							want += float64(z[(pos*c.Heads+h)*c.HeadDim+i]) * o.At(i, j)
						}
					}
					require.InDelta(t, want, out[pos*c.DModel+j], 1e-4, "hook_attn_out pos %d col %d", pos, j)
				}
			}
		})
	}
}

// Composition scores, against the d_model x d_model products written out.
func TestCompositionScoresAgainstTheProductsWrittenOut(t *testing.T) {
	m := nb.Open("")
	const layer, head = 3, 0
	dst := m.HeadWeights(layer, head)
	product := func(a, b mat.Matrix) *mat.Dense {
		var p mat.Dense
		p.Mul(a, b)
		return &p
	}
	frobenius := func(x *mat.Dense) float64 {
		var s float64
		r, c := x.Dims()
		for i := range r {
			for j := range c {
				s += x.At(i, j) * x.At(i, j)
			}
		}
		return math.Sqrt(s)
	}
	qk := product(dst.Q, dst.K.T())
	for _, c := range []struct {
		kind nb.Composition
		w    mat.Matrix
	}{
		{nb.QComposition, qk},
		{nb.KComposition, qk.T()},
		{nb.VComposition, product(dst.V, dst.O)},
	} {
		scores := m.CompositionScores(layer, head, c.kind)
		require.Len(t, scores, layer, c.kind)
		w := mat.DenseCopyOf(c.w)
		for l := range layer {
			for h := range m.Config().Heads {
				src := m.HeadWeights(l, h)
				ov := product(src.V, src.O)
				want := frobenius(product(ov, w)) / (frobenius(ov) * frobenius(w))
				// Both in float64; the traces of products round differently.
				require.InEpsilon(t, want, scores[l][h], 1e-9, "%v L%dH%d", c.kind, l, h)
			}
		}
	}
}

// On the default model, the strongest induction head's keys read most
// from the strongest previous-token head: the circuit that notebook 02
// finds in attention patterns is in the weights too.
func TestTheInductionHeadsKeysReadThePreviousTokenHead(t *testing.T) {
	m := nb.Open("")
	seq := m.RepeatedRandom(40, 7)
	ind, prev := m.HeadScores(seq, nb.Induction).Best(), m.HeadScores(seq, nb.PrevToken).Best()
	k := m.CompositionScores(ind.Layer, ind.Head, nb.KComposition).Best()
	require.Equal(t, [2]int{prev.Layer, prev.Head}, [2]int{k.Layer, k.Head})

	require.PanicsWithError(t, "nb.HeadWeights: head 8: the model has 8 heads (0-7)", func() { m.HeadWeights(0, 8) })
	require.PanicsWithError(t, "nb.HeadWeights: layer 4: the model has 4 layers (0-3)", func() { m.CompositionScores(4, 0, nb.KComposition) })
}

// Copying scores against the vocabulary-sized OV circuit W_E W_V W_O W_U
// written out in float64, with W_E and W_U built here from the model's
// tensors, and its eigenvalues: the score takes them from a d_head x d_head
// product instead, and sums W_U W_E a block of tokens at a time.
func TestCopyingScoresAgainstTheWholeCircuit(t *testing.T) {
	for _, shape := range []string{"tiny-llama", "tiny-gpt2", "tiny-gemma2"} {
		t.Run(shape, func(t *testing.T) {
			m := openGenerated(t, shape)
			c := m.Config()
			vocab, d := c.Vocab, c.DModel
			rows := func(w *model.Weight) []float32 {
				out := make([]float32, w.Rows*w.Cols)
				w.Format.Dequantize(out, w.Data)
				return out
			}
			scale := float64(c.EmbedScale)
			if scale == 0 {
				scale = 1
			}
			e, u := rows(m.Engine().Model.Embed), rows(m.Engine().Model.Output)
			wE, wU := mat.NewDense(vocab, d, nil), mat.NewDense(d, vocab, nil)
			for tok := range vocab {
				var mean float64
				for i := range d {
					wE.Set(tok, i, scale*float64(e[tok*d+i]))
					wU.Set(i, tok, float64(u[tok*d+i])*float64(m.Engine().Model.OutNorm[i]))
					mean += wU.At(i, tok) / float64(d)
				}
				if c.Norm == model.NormLayer { // a LayerNorm's output has mean 0
					for i := range d {
						wU.Set(i, tok, wU.At(i, tok)-mean)
					}
				}
			}
			for i := range d { // center_unembed: each row of W_U has mean 0
				row := wU.RawRowView(i)
				floats.AddConst(-floats.Sum(row)/float64(vocab), row)
			}
			got := m.CopyingScores()
			for _, at := range [][2]int{{0, 0}, {1, c.Heads - 1}} {
				hw := m.HeadWeights(at[0], at[1])
				var ev, evo, circuit mat.Dense
				ev.Mul(wE, hw.V)
				evo.Mul(&ev, hw.O)
				circuit.Mul(&evo, wU)
				var eig mat.Eigen
				require.True(t, eig.Factorize(&circuit, mat.EigenNone))
				var sum, abs float64
				for _, v := range eig.Values(nil) {
					sum += real(v)
					abs += cmplx.Abs(v)
				}
				// All but d_head of the vocabulary's eigenvalues are 0 in
				// exact arithmetic; rounding leaves them near 1e-13 of the
				// largest, so the two sums agree to far better than 1e-9.
				require.InDelta(t, sum/abs, got[at[0]][at[1]], 1e-9, "L%dH%d", at[0], at[1])
			}
		})
	}
}

// The default model's induction head (MODEL.md: L3H0) copies most.
func TestTheInductionHeadCopies(t *testing.T) {
	m := nb.Open("", nb.Backend("cpu"))
	s := m.CopyingScores()
	best := s.Best()
	require.Equal(t, [2]int{3, 0}, [2]int{best.Layer, best.Head}, "%v", s.Top(5))
	require.Greater(t, best.Score, 0.9)
}

// A layer's neurons sum to its mlp_out term of DLA (less W_out's bias, by
// hand here): DLA reads the engine's captured mlp_out, NeuronDLA the
// captured activations and the decoded W_out, so the two meet only if the
// neuron terms and the final norm's treatment are right. The engine's
// mlp_out is a float32 sum over ffn products: 6e-7 apart at most here, so
// 5e-6 (of values near 1); the norm's eps moves them less than that.
func TestNeuronDLASumsToTheMLPTerm(t *testing.T) {
	for _, shape := range []string{"tiny-llama", "tiny-gpt2", "tiny-qwen3"} {
		t.Run(shape, func(t *testing.T) {
			m := openGenerated(t, shape)
			c := m.Config()
			ids := []int32{1, 5, 9, 2, 7, 3}
			tr := m.Prefill(ids, nb.CaptureDLA(), nb.CaptureNeuronDLA())
			dir := m.LogitDirection(int32(4), int32(6))
			for _, pos := range []int{-1, 2} {
				neurons := m.NeuronDLA(tr, dir, pos)
				terms := map[string]float64{}
				for _, p := range m.DLA(tr, dir, pos) {
					terms[p.Label] = p.Logit
				}
				final := nb.Must(tr.Resid(c.Layers))
				p := pos
				if p < 0 {
					p += len(ids)
				}
				for l := range c.Layers {
					sum := floats.Sum(neurons[l])
					if b := m.Engine().Model.Blocks[l].DownBias; b != nil {
						// The bias through the final norm, as DLA's term has it.
						x := final.Row(p)
						var mean, ss, mb, dot float64
						for i := range x {
							mean += float64(x[i]) / float64(c.DModel)
							mb += float64(b[i]) / float64(c.DModel)
						}
						for i := range x {
							ss += (float64(x[i]) - mean) * (float64(x[i]) - mean)
							dot += (float64(b[i]) - mb) * float64(m.Engine().Model.OutNorm[i]) * float64(dir[i])
						}
						sum += dot / math.Sqrt(ss/float64(c.DModel)+float64(c.NormEps))
					}
					want := terms[fmt.Sprintf("%d_mlp_out", l)]
					require.InDelta(t, want, sum, 5e-6*max(1, math.Abs(want)), "layer %d position %d", l, pos)
				}
			}
			top := m.NeuronDLA(tr, dir, -1).Top(3)
			require.Len(t, top, 3)
			require.GreaterOrEqual(t, top[0].Score, top[1].Score)
			require.Regexp(t, `^L\dN\d+ [+-]\d\.\d{3}, `, top.String())
		})
	}
}

func TestNeuronDLARefusesWhatHasNoNeurons(t *testing.T) {
	for shape, want := range map[string]string{
		"tiny-gemma2":   "nb.NeuronDLA: the model normalises each MLP's output after its neurons are summed, so a neuron has no direct term of its own",
		"tiny-qwen3moe": "nb.NeuronDLA: the model's MLPs are mixtures of experts: each token's neurons are its experts', with no one W_out to attribute through",
	} {
		m := openGenerated(t, shape)
		tr := m.Prefill([]int32{1, 2, 3}, nb.Capture("blocks.*.hook_resid_post"))
		require.PanicsWithError(t, want, func() { m.NeuronDLA(tr, m.Unembed(int32(1)), -1) }, shape)
	}
	m := openGenerated(t, "tiny-llama")
	tr := m.Prefill([]int32{1, 2, 3}, nb.CaptureNeuronDLA())
	require.PanicsWithError(t, "nb.NeuronDLA: position -4 is out of range: the trace has 3 (-1 is the last)", func() { m.NeuronDLA(tr, m.Unembed(int32(1)), -4) })
	require.PanicsWithError(t, "nb.NeuronDLA: a direction of 2 values; the residual stream has 256", func() { m.NeuronDLA(tr, []float32{1, 2}, -1) })
	tr = m.Prefill([]int32{1, 2, 3}, nb.Capture("blocks.*.hook_resid_post"))
	var err error
	func() {
		defer func() { err, _ = recover().(error) }()
		m.NeuronDLA(tr, m.Unembed(int32(1)), -1)
	}()
	require.ErrorContains(t, err, "nb.NeuronDLA: trace: blocks.0.mlp.hook_post was not captured")
	require.ErrorContains(t, err, "(prefill with nb.CaptureNeuronDLA(): it captures all that NeuronDLA reads)")
}
