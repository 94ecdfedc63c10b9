package engine_test

import (
	"math"
	"sort"
	"testing"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/synth"
	"github.com/stratalab/strata/trace"
)

// refModel is a model's weights decoded to float64 for the reference.
type refModel struct {
	c                model.Config
	embed, posEmbed  [][]float64
	output           [][]float64
	outNorm, outBias []float64
	layers           []refLayer
}

type refLayer struct {
	attnNorm, ffnNorm         []float64
	attnNormBias, ffnNormBias []float64
	attnPostNorm, ffnPostNorm []float64
	q, k, v, o                [][]float64
	qBias, kBias, vBias       []float64
	oBias, upBias, downBias   []float64
	qNorm, kNorm              []float64
	gate, up, down            [][]float64
	router                    [][]float64
	experts                   [][3][][]float64 // gate, up, down
}

func f64(v []float32) []float64 {
	if v == nil {
		return nil
	}
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func decodeMatrix(w *model.Weight) [][]float64 {
	if w == nil {
		return nil
	}
	flat := make([]float32, w.Rows*w.Cols)
	w.Format.Dequantize(flat, w.Data)
	m := make([][]float64, w.Rows)
	for r := range m {
		m[r] = f64(flat[r*w.Cols : (r+1)*w.Cols])
	}
	return m
}

func newRef(m *model.Model) *refModel {
	r := &refModel{c: m.Config, embed: decodeMatrix(m.Embed), posEmbed: decodeMatrix(m.PosEmbed), output: decodeMatrix(m.Output),
		outNorm: f64(m.OutNorm), outBias: f64(m.OutNormBias)}
	for _, l := range m.Blocks {
		r.layers = append(r.layers, refLayer{
			attnNorm: f64(l.AttnNorm), ffnNorm: f64(l.FFNNorm),
			attnNormBias: f64(l.AttnNormBias), ffnNormBias: f64(l.FFNNormBias),
			attnPostNorm: f64(l.AttnPostNorm), ffnPostNorm: f64(l.FFNPostNorm),
			q: decodeMatrix(l.Q), k: decodeMatrix(l.K), v: decodeMatrix(l.V), o: decodeMatrix(l.O),
			qBias: f64(l.QBias), kBias: f64(l.KBias), vBias: f64(l.VBias),
			oBias: f64(l.OBias), upBias: f64(l.UpBias), downBias: f64(l.DownBias),
			router: decodeMatrix(l.Router), experts: decodeExperts(l.Experts),
			qNorm: f64(l.QNorm), kNorm: f64(l.KNorm),
			gate: decodeMatrix(l.Gate), up: decodeMatrix(l.Up), down: decodeMatrix(l.Down),
		})
	}
	return r
}

// refPoints runs tokens at positions 0.. through the model in float64 and
// returns every capture point, flattened in the engine's layouts.
func (r *refModel) points(tokens []int32) map[string][]float64 {
	c := &r.c
	T, H, KV, hd := len(tokens), c.Heads, c.KVHeads, c.HeadDim
	out := map[string][]float64{}
	put := func(name string, rows [][]float64) {
		var flat []float64
		for _, row := range rows {
			flat = append(flat, row...)
		}
		out[name] = flat
	}
	x := make([][]float64, T)
	for t, id := range tokens {
		x[t] = append([]float64(nil), r.embed[id]...)
		if c.EmbedScale != 0 { // Gemma: sqrt(d_model), in float64 here
			for i := range x[t] {
				x[t][i] *= math.Sqrt(float64(c.DModel))
			}
		}
	}
	put("hook_embed", x)
	if r.posEmbed != nil {
		pos := r.posEmbed[:T]
		put("hook_pos_embed", pos)
		x = addRows(x, pos)
	}
	norm := func(x [][]float64, gain, bias []float64) [][]float64 {
		if c.Norm == model.NormLayer {
			return layerNormRows(x, gain, bias, float64(c.NormEps))
		}
		return rmsRows(x, gain, float64(c.NormEps))
	}
	// scales are what each row is divided by: hook_scale.
	scales := func(x [][]float64) [][]float64 {
		out := make([][]float64, len(x))
		for t, row := range x {
			mean, ss := 0.0, 0.0
			if c.Norm == model.NormLayer {
				for _, v := range row {
					mean += v
				}
				mean /= float64(len(row))
			}
			for _, v := range row {
				ss += (v - mean) * (v - mean)
			}
			out[t] = []float64{math.Sqrt(ss/float64(len(row)) + float64(c.NormEps))}
		}
		return out
	}
	for l, w := range r.layers {
		p := func(s trace.Point) string { return trace.LayerPoint(l, s) }
		put(p("hook_resid_pre"), x)
		put(p("ln1.hook_scale"), scales(x))
		h := norm(x, w.attnNorm, w.attnNormBias)
		put(p("ln1.hook_normalized"), h)
		q, k, v := linear(h, w.q, w.qBias), linear(h, w.k, w.kBias), linear(h, w.v, w.vBias)
		if c.QKNorm {
			q, k = headNorm(q, w.qNorm, hd, float64(c.NormEps)), headNorm(k, w.kNorm, hd, float64(c.NormEps))
		}
		put(p("attn.hook_q"), q)
		put(p("attn.hook_k"), k)
		put(p("attn.hook_v"), v)
		// Gemma's sliding layers: a window of keys, and gemma3's local RoPE.
		window, ropeL := 0, c.Rope
		if c.SWAPattern > 0 && l%c.SWAPattern < c.SWAPattern-1 {
			window = c.SlidingWindow
			if c.LocalRope != nil {
				ropeL = *c.LocalRope
			}
		}
		if c.LongRope != nil && c.Context > c.Rope.Scaling.OrigContext { // as llama.cpp chooses

			ropeL = *c.LongRope
		}
		if c.Pos == model.PosRope {
			q, k = rope(q, hd, ropeL), rope(k, hd, ropeL)
			put(p("attn.hook_rot_q"), q)
			put(p("attn.hook_rot_k"), k)
		}
		put(p("attn.cache_k"), k)
		put(p("attn.cache_v"), v)
		scores := make([][]float64, H*T)
		pattern := make([][]float64, H*T)
		z := make([][]float64, T)
		for t := range z {
			z[t] = make([]float64, H*hd)
		}
		scale := 1 / math.Sqrt(float64(hd))
		if c.AttnScale != 0 { // the 27B Gemmas'
			scale = float64(c.AttnScale)
		}
		for hh := 0; hh < H; hh++ {
			kvh := hh / (H / KV)
			for i := 0; i < T; i++ {
				row := make([]float64, T)
				for j := 0; j < T; j++ {
					if j > i || (window > 0 && i-j >= window) {
						row[j] = math.Inf(-1)
						continue
					}
					s := 0.0
					for d := 0; d < hd; d++ {
						s += q[i][hh*hd+d] * k[j][kvh*hd+d]
					}
					row[j] = s * scale
					if c.AttnSoftcap != 0 {
						row[j] = capTanh(row[j], float64(c.AttnSoftcap))
					}
				}
				scores[hh*T+i] = row
				mx := math.Inf(-1)
				for _, s := range row {
					mx = math.Max(mx, s)
				}
				pr, sum := make([]float64, T), 0.0
				for j, s := range row {
					pr[j] = math.Exp(s - mx)
					sum += pr[j]
				}
				for j := range pr {
					pr[j] /= sum
					for d := 0; d < hd; d++ {
						z[i][hh*hd+d] += pr[j] * v[j][kvh*hd+d]
					}
				}
				pattern[hh*T+i] = pr
			}
		}
		put(p("attn.hook_attn_scores"), scores)
		put(p("attn.hook_pattern"), pattern)
		put(p("attn.hook_z"), z)
		attnOut := linear(z, w.o, w.oBias)
		if w.attnPostNorm != nil {
			attnOut = rmsRows(attnOut, w.attnPostNorm, float64(c.NormEps))
		}
		put(p("hook_attn_out"), attnOut)
		x = addRows(x, attnOut)
		put(p("hook_resid_mid"), x)
		put(p("ln2.hook_scale"), scales(x))
		h = norm(x, w.ffnNorm, w.ffnNormBias)
		put(p("ln2.hook_normalized"), h)
		var post [][]float64
		switch {
		case c.MoE():
			mlpOut := r.mixture(w, h, put, p)
			put(p("hook_mlp_out"), mlpOut)
			x = addRows(x, mlpOut)
			put(p("hook_resid_post"), x)
			continue
		case c.MLP == model.MLPSwiGLU || c.MLP == model.MLPGeGLU:
			gate, up := linear(h, w.gate, nil), linear(h, w.up, nil)
			put(p("mlp.hook_pre"), gate)
			put(p("mlp.hook_pre_linear"), up)
			post = make([][]float64, T)
			for t := range post {
				post[t] = make([]float64, len(gate[t]))
				for i, g := range gate[t] {
					if c.MLP == model.MLPGeGLU {
						post[t][i] = geluNew(g) * up[t][i]
					} else {
						post[t][i] = g / (1 + math.Exp(-g)) * up[t][i]
					}
				}
			}
		case c.MLP == model.MLPGELU:
			pre := linear(h, w.up, w.upBias)
			put(p("mlp.hook_pre"), pre)
			post = make([][]float64, T)
			for t := range post {
				post[t] = make([]float64, len(pre[t]))
				for i, v := range pre[t] {
					post[t][i] = geluNew(v)
				}
			}
		}
		put(p("mlp.hook_post"), post)
		mlpOut := linear(post, w.down, w.downBias)
		if w.ffnPostNorm != nil {
			mlpOut = rmsRows(mlpOut, w.ffnPostNorm, float64(c.NormEps))
		}
		put(p("hook_mlp_out"), mlpOut)
		x = addRows(x, mlpOut)
		put(p("hook_resid_post"), x)
	}
	put("ln_final.hook_scale", scales(x))
	h := norm(x, r.outNorm, r.outBias)
	put("ln_final.hook_normalized", h)
	logits := linear(h, r.output, nil)
	if c.FinalSoftcap != 0 {
		for _, row := range logits {
			for i := range row {
				row[i] = capTanh(row[i], float64(c.FinalSoftcap))
			}
		}
	}
	put("logits", logits)
	return out
}

func decodeExperts(xs []model.Expert) [][3][][]float64 {
	var out [][3][][]float64
	for _, x := range xs {
		out = append(out, [3][][]float64{decodeMatrix(x.Gate), decodeMatrix(x.Up), decodeMatrix(x.Down)})
	}
	return out
}

// mixture is a mixture of experts in float64: softmax over the router's
// logits, each token's top k experts (the lower index on a tie), their
// probabilities renormalised, their SwiGLU outputs mixed by them.
func (r *refModel) mixture(w refLayer, h [][]float64, put func(string, [][]float64), p func(trace.Point) string) [][]float64 {
	c := &r.c
	k := c.ExpertsUsed
	logits := linear(h, w.router, nil)
	put(p("mlp.hook_router_logits"), logits)
	ids, weights, outs, mixed := make([][]float64, len(h)), make([][]float64, len(h)), make([][]float64, len(h)), make([][]float64, len(h))
	for t, row := range logits {
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, v)
		}
		prob, sum := make([]float64, len(row)), 0.0
		for e, v := range row {
			prob[e] = math.Exp(v - mx)
			sum += prob[e]
		}
		order := make([]int, len(row))
		for e := range order {
			order[e] = e
		}
		sort.SliceStable(order, func(a, b int) bool { return prob[order[a]] > prob[order[b]] })
		kept := 0.0
		for _, e := range order[:k] {
			kept += prob[e] / sum
		}
		mixed[t] = make([]float64, c.DModel)
		for _, e := range order[:k] {
			if prob[e] == 0 { // an empty slot
				ids[t], weights[t] = append(ids[t], -1), append(weights[t], 0)
				outs[t] = append(outs[t], make([]float64, c.DModel)...)
				continue
			}
			ids[t] = append(ids[t], float64(e))
			wt := prob[e] / sum / kept
			weights[t] = append(weights[t], wt)
			x := w.experts[e]
			gate, up := linear([][]float64{h[t]}, x[0], nil)[0], linear([][]float64{h[t]}, x[1], nil)[0]
			for i, g := range gate {
				gate[i] = g / (1 + math.Exp(-g)) * up[i]
			}
			y := linear([][]float64{gate}, x[2], nil)[0]
			outs[t] = append(outs[t], y...)
			for i, v := range y {
				mixed[t][i] += wt * v
			}
		}
	}
	put(p("mlp.hook_expert_ids"), ids)
	put(p("mlp.hook_expert_weights"), weights)
	put(p("mlp.hook_expert_out"), outs)
	return mixed
}

// geluNew is GPT-2's gelu_new (Gemma's gelu_pytorch_tanh), as HuggingFace
// writes it.
func geluNew(v float64) float64 {
	return 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*math.Pow(v, 3))))
}

func capTanh(x, cap float64) float64 { return cap * math.Tanh(x/cap) }

func rmsRows(x [][]float64, gain []float64, eps float64) [][]float64 {
	out := make([][]float64, len(x))
	for t, row := range x {
		ss := 0.0
		for _, v := range row {
			ss += v * v
		}
		s := 1 / math.Sqrt(ss/float64(len(row))+eps)
		out[t] = make([]float64, len(row))
		for i, v := range row {
			out[t][i] = v * s * gain[i]
		}
	}
	return out
}

func layerNormRows(x [][]float64, gain, bias []float64, eps float64) [][]float64 {
	out := make([][]float64, len(x))
	for t, row := range x {
		mean, v := 0.0, 0.0
		for _, e := range row {
			mean += e
		}
		mean /= float64(len(row))
		for _, e := range row {
			v += (e - mean) * (e - mean)
		}
		s := 1 / math.Sqrt(v/float64(len(row))+eps)
		out[t] = make([]float64, len(row))
		for i, e := range row {
			out[t][i] = (e-mean)*s*gain[i] + bias[i]
		}
	}
	return out
}

func headNorm(x [][]float64, gain []float64, hd int, eps float64) [][]float64 {
	out := make([][]float64, len(x))
	for t, row := range x {
		var heads [][]float64
		for h := 0; h < len(row)/hd; h++ {
			heads = append(heads, row[h*hd:(h+1)*hd])
		}
		var flat []float64
		for _, n := range rmsRows(heads, gain, eps) {
			flat = append(flat, n...)
		}
		out[t] = flat
	}
	return out
}

func linear(x [][]float64, w [][]float64, bias []float64) [][]float64 {
	out := make([][]float64, len(x))
	for t, row := range x {
		out[t] = make([]float64, len(w))
		for r, wr := range w {
			s := 0.0
			for i, v := range row {
				s += v * wr[i]
			}
			if bias != nil {
				s += bias[r]
			}
			out[t][r] = s
		}
	}
	return out
}

func addRows(a, b [][]float64) [][]float64 {
	out := make([][]float64, len(a))
	for t := range a {
		out[t] = make([]float64, len(a[t]))
		for i := range a[t] {
			out[t][i] = a[t][i] + b[t][i]
		}
	}
	return out
}

// rope rotates each head of each row at position = row index, with linear
// scaling but not YaRN; a pair's frequency is divided by its factor when
// the model has them (Llama 3's rope_freqs.weight).
func rope(x [][]float64, hd int, r model.Rope) [][]float64 {
	out := make([][]float64, len(x))
	for pos, row := range x {
		out[pos] = append([]float64(nil), row...)
		for h := 0; h < len(row)/hd; h++ {
			v := out[pos][h*hd : (h+1)*hd]
			for i := 0; i < r.Dim/2; i++ {
				theta := float64(pos) / math.Pow(r.Theta, float64(2*i)/float64(r.Dim))
				if r.Scaling.Type == "linear" {
					theta /= r.Scaling.Factor
				}
				if r.FreqFactors != nil {
					theta /= float64(r.FreqFactors[i])
				}
				a, b := 2*i, 2*i+1
				if r.Mode == model.RopeNeoX {
					a, b = i, i+r.Dim/2
				}
				m := r.Scaling.AttnFactor // Phi-3's LongRoPE magnitude; 1 otherwise
				x0, x1 := v[a], v[b]
				v[a] = (x0*math.Cos(theta) - x1*math.Sin(theta)) * m
				v[b] = (x0*math.Sin(theta) + x1*math.Cos(theta)) * m
			}
		}
	}
	return out
}

// genModel builds a random model of a named shape in memory.
func genModel(t testing.TB, shape string, typ gguf.Type, seed uint64) *model.Model {
	t.Helper()
	m, err := synth.Random(synth.Shapes[shape], typ, seed)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// relErr is max|got-want| / max|want| over finite entries; -Inf must match exactly.
func relErr(got []float32, want []float64) (float64, bool) {
	if len(got) != len(want) {
		return math.Inf(1), false
	}
	var maxDiff, maxRef float64
	for i, w := range want {
		g := float64(got[i])
		if math.IsInf(w, 0) || math.IsInf(g, 0) {
			if g != w {
				return math.Inf(1), false
			}
			continue
		}
		maxDiff = math.Max(maxDiff, math.Abs(g-w))
		maxRef = math.Max(maxRef, math.Abs(w))
	}
	if maxRef == 0 {
		return maxDiff, true
	}
	return maxDiff / maxRef, true
}
