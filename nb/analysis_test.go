package nb_test

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/nb"
	"github.com/stratalab/strata/trace"
	"github.com/stratalab/strata/viz"
)

func cpuModel(t *testing.T) *nb.Model {
	m, err := nb.TryOpen("", nb.Backend("cpu"))
	require.NoError(t, err)
	return m
}

// logSoftmax64 is a plain float64 log-softmax, independent of trace's.
func logSoftmax64(row []float32, k int) float64 {
	m := math.Inf(-1)
	for _, v := range row {
		m = math.Max(m, float64(v))
	}
	var s float64
	for _, v := range row {
		s += math.Exp(float64(v) - m)
	}
	return float64(row[k]) - m - math.Log(s)
}

func TestLossIsTheNextTokensCrossEntropy(t *testing.T) {
	m := cpuModel(t)
	prompt := "func (s *Server) Close() error {\n\treturn nil\n}"
	loss := m.Loss(prompt)
	tr := m.Prefill(prompt, nb.AllLogits())
	l := tr.Tensor("logits")
	V := l.Shape[1]
	require.Len(t, loss, len(tr.Tokens)-1)
	for i := range loss {
		want := -logSoftmax64(l.Data[i*V:(i+1)*V], int(tr.Tokens[i+1]))
		// Same logits (a deterministic CPU run), float64 either side.
		require.InDelta(t, want, loss[i], 1e-9, "position %d", i)
	}
	require.InDelta(t, mean(loss[3:]), m.MeanLoss(3)(tr), 1e-12)
	// A trained model predicts "return nil\n}" better than chance (ln 2048 = 7.6).
	require.Less(t, mean(loss), 7.6)
}

// MeanLoss(-k) resolved the position on the first trace it scored and kept
// it for every later one, so a sweep over prompts of other lengths averaged
// the wrong positions without a word.
func TestMeanLossFromTheEndFitsEachTrace(t *testing.T) {
	m := cpuModel(t)
	metric := m.MeanLoss(-4)
	long, short := m.Prefill("func (s *Server) Close() error {\n\treturn nil\n}", nb.AllLogits()), m.Prefill("if err != nil {\n\treturn err\n}", nb.AllLogits())
	for _, tr := range []*trace.Trace{long, short, long} {
		loss := nb.Must(tr.TokenLoss())
		require.InDelta(t, mean(loss[len(loss)-3:]), metric(tr), 1e-12, "%d tokens", len(tr.Tokens))
	}
	n := len(short.Tokens)
	require.PanicsWithError(t, fmt.Sprintf("nb.MeanLoss(-99): the trace of %d tokens has losses at positions 0..%d (or -%d..-2 from the end)", n, n-2, n),
		func() { m.MeanLoss(-99)(short) })
	one := m.Prefill([]int32{short.Tokens[0]}, nb.AllLogits())
	require.PanicsWithError(t, "nb.MeanLoss(0): the trace of 1 token has no losses: a position's loss is that of the next token",
		func() { m.MeanLoss(0)(one) }, "it said positions 0..-1")
}

func mean(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}

func TestHeadScoresAreNotebook02sLoop(t *testing.T) {
	m := cpuModel(t)
	seq := m.RepeatedRandom(20, 7)
	got := m.HeadScores(seq, nb.Induction)
	tr := m.Prefill(seq, nb.Capture("blocks.*.attn.hook_pattern"))
	for l := range m.Config().Layers {
		want, err := trace.InductionScores(tr.Tensor(trace.LayerPoint(l, "attn.hook_pattern")), 20)
		require.NoError(t, err)
		require.Equal(t, want, got[l])
	}
	// MODEL.md: the default model has an induction head.
	require.Greater(t, got.Best().Score, 0.4)
}

// Ablating each head equals running the ablation hook yourself.
func TestAblateHeadsIsTheHookByHand(t *testing.T) {
	m := cpuModel(t)
	prompt := "func add(a, b int) int {\n\treturn a + b\n"
	metric := m.LogitDiff("}", ")")
	require.Equal(t, "zero ablation, mean ablation, Ablation(7)", fmt.Sprintf("%v, %v, %v", nb.ZeroAblation, nb.MeanAblation, nb.Ablation(7)))
	for _, how := range []nb.Ablation{nb.ZeroAblation, nb.MeanAblation} {
		got := m.AblateHeads(prompt, metric, how)
		require.Len(t, got, m.Config().Layers)
		base := metric(m.Prefill(prompt))
		for l := range m.Config().Layers {
			for h := range m.Config().Heads {
				hook := engine.AblateHead(l, h)
				if how == nb.MeanAblation {
					hook = engine.MeanAblateHead(l, h)
				}
				want := metric(m.Prefill(prompt, nb.Hooks(hook))) - base
				require.InDelta(t, want, got[l][h], 1e-9, "L%dH%d", l, h)
			}
		}
	}
	// A loss metric with every position's logits.
	loss := m.AblateHeads(prompt, m.MeanLoss(0), nb.ZeroAblation, nb.AllLogits())
	want := m.Prefill(prompt, nb.AllLogits(), nb.Hooks(engine.AblateHead(1, 0)))
	require.InDelta(t, m.MeanLoss(0)(want)-mean(m.Loss(prompt)), loss[1][0], 1e-9)
}

// Patching a head equals copying the clean run's hook_z for that head in a
// host hook, and normalising maps the baselines to 0 and 1.
func TestPatchHeadsIsAHostCopyOfTheCleanHead(t *testing.T) {
	m := cpuModel(t)
	clean, corrupt := "x := a + b; y := a ", "x := a - b; y := a "
	metric := m.LogitDiff("+", "-")
	p := m.PatchHeads(clean, corrupt, metric)
	require.Equal(t, metric(m.Prefill(clean)), p.Clean)
	require.Equal(t, metric(m.Prefill(corrupt)), p.Corrupt)
	src := m.Prefill(clean, nb.Capture("blocks.*.attn.hook_z"))
	for l := range m.Config().Layers {
		for h := range m.Config().Heads {
			z := src.Tensor(trace.LayerPoint(l, "attn.hook_z"))
			hd := m.Config().HeadDim
			host := engine.Hook{Point: trace.LayerPoint(l, "attn.hook_z"), Host: func(_ string, shape []int, data []float32) error {
				for p := range shape[0] {
					o := (p*shape[1] + h) * hd
					copy(data[o:o+hd], z.Data[o:o+hd])
				}
				return nil
			}}
			want := metric(m.Prefill(corrupt, nb.Hooks(host)))
			// The same float32 values reach the same kernels either way.
			require.InDelta(t, want, p.Patched[l][h], 1e-9, "layer %d head %d", l, h)
		}
	}
	n := p.Normalized()
	for l := range n {
		for h := range n[l] {
			require.InDelta(t, (p.Patched[l][h]-p.Corrupt)/(p.Clean-p.Corrupt), n[l][h], 1e-12)
		}
	}
	normalize := func(clean, corrupt float64) func() {
		return func() { (&nb.Patching{Patched: p.Patched, Clean: clean, Corrupt: corrupt}).Normalized() }
	}
	require.PanicsWithError(t, "nb.Patching.Normalized: the clean and corrupted metric are both 1; nothing to normalise by", normalize(1, 1))
	require.PanicsWithError(t, "nb.Patching.Normalized: the clean metric is NaN and the corrupted 1: every cell would be NaN; the model or the metric went non-finite (a trace with nb.Capture(\"*\") names the first point that did)",
		normalize(math.NaN(), 1))
	require.Panics(t, normalize(math.Inf(1), 1))
	require.Panics(t, func() { m.PatchHeads("a", "a b c", metric) })
}

// Patching a head at a position equals copying that slice of the clean
// run's hook_z in a host hook; the rows are the heads, layer by layer.
func TestPatchHeadPositionsIsAHostCopyOfTheCleanHeadAtAPosition(t *testing.T) {
	m := cpuModel(t)
	clean, corrupt := "x := a + b; y := a ", "x := a - b; y := a "
	metric := m.LogitDiff("+", "-")
	p := m.PatchHeadPositions(clean, corrupt, metric)
	src := m.Prefill(clean, nb.Capture("blocks.*.attn.hook_z"))
	n, heads, hd := len(m.Tokens(corrupt)), m.Config().Heads, m.Config().HeadDim
	require.Len(t, p.Patched, m.Config().Layers*heads)
	require.Equal(t, metric(m.Prefill(corrupt)), p.Corrupt)
	for _, l := range []int{0, m.Config().Layers - 1} {
		z := src.Tensor(trace.LayerPoint(l, "attn.hook_z"))
		for _, h := range []int{0, heads - 1} {
			require.Len(t, p.Patched[l*heads+h], n)
			for _, pos := range []int{0, 4, n - 1} {
				host := engine.Hook{Point: trace.LayerPoint(l, "attn.hook_z"), Host: func(_ string, _ []int, data []float32) error {
					o := (pos*heads + h) * hd
					copy(data[o:o+hd], z.Data[o:o+hd])
					return nil
				}}
				want := metric(m.Prefill(corrupt, nb.Hooks(host)))
				require.InDelta(t, want, p.Patched[l*heads+h][pos], 1e-9, "layer %d head %d position %d", l, h, pos)
			}
		}
	}
	require.Equal(t, "L1H0", viz.LayerHeadLabels(m.Config().Layers, heads)[heads])
	_, err := m.TryPrefill(corrupt, nb.Hooks(engine.PatchHead(0, 0, src, n)))
	require.ErrorContains(t, err, fmt.Sprintf("position %d is outside blocks.0.attn.hook_z's %d positions", n, n))
}

func TestPatchResidNormalized(t *testing.T) {
	m := cpuModel(t)
	clean, corrupt := m.Tokens("x := a + b"), m.Tokens("x := a - b")
	diff := -1
	for i := range clean {
		if clean[i] != corrupt[i] {
			diff = i
		}
	}
	res := m.PatchResid(clean, corrupt, m.LogitDiff(" b", " c")).Normalized()
	// Layer 0's resid_pre is the embedding: patching the differing token
	// gives the clean run (1), any other position the corrupted one (0).
	for p := range clean {
		want := 0.0
		if p == diff {
			want = 1
		}
		require.InDelta(t, want, res[0][p], 1e-9, "position %d", p)
	}
}

func TestSteeringVectorIsTheResidDifference(t *testing.T) {
	m := cpuModel(t)
	v := m.SteeringVector("var x string", "var x int", 2, -1)
	name := trace.LayerPoint(2, "hook_resid_pre")
	a := m.Prefill("var x string", nb.Capture(name)).Tensor(name)
	b := m.Prefill("var x int", nb.Capture(name)).Tensor(name)
	d := m.Config().DModel
	require.Len(t, v, d)
	for i := range v {
		require.Equal(t, a.At(a.Shape[0]-1, i)-b.At(b.Shape[0]-1, i), v[i])
	}
	// Adding it to the last position of b's run at layer 2 makes that
	// row a's: the next layer sees a's resid_pre there.
	pos := []int{b.Shape[0] - 1}
	next := trace.LayerPoint(2, "ln1.hook_normalized")
	steered := m.Prefill("var x int", nb.Capture(next), nb.Hooks(engine.AddVector(name, v, 1, pos)))
	want := m.Prefill("var x string", nb.Capture(next)).Tensor(next)
	got := steered.Tensor(next)
	for i := range d {
		// a - b + b in float32 is a to within one rounding of |a|, ~1e-6.
		require.InDelta(t, want.At(want.Shape[0]-1, i), got.At(got.Shape[0]-1, i), 1e-4)
	}
	require.NotPanics(t, func() { m.Prefill("func f() ", nb.Steer(2, v, 4)) })
	require.Panics(t, func() { m.SteeringVector("a", "b", 2, 40) })
}

// Direct logit attribution: the components sum to the logit the model
// computed, and each layer's heads sum to its attention term.
func TestDLASumsToTheLogit(t *testing.T) {
	m := cpuModel(t)
	prompt := "if err != nil {\n\treturn"
	tr := m.Prefill(prompt, nb.CaptureDLA())
	tok := tr.Predicted[len(tr.Predicted)-1]
	logits := tr.Tensor("logits")
	for _, pos := range []int{-1} {
		dla := m.DLA(tr, m.Unembed(tok), pos)
		require.Equal(t, "embed", dla[0].Label)
		require.Len(t, dla, 1+2*m.Config().Layers)
		var sum float64
		for _, c := range dla {
			sum += c.Logit
		}
		want := float64(logits.At(0, int(tok)))
		// The engine's logit is a float32 dot over d_model after a float32
		// norm; ours rounds each component to float32 once: ~1e-5 relative.
		require.InDelta(t, want, sum, 1e-4*(1+math.Abs(want)))

		heads := m.HeadDLA(tr, m.Unembed(tok), pos)
		for l := range m.Config().Layers {
			var s float64
			for _, v := range heads[l] {
				s += v
			}
			attn := dla[1+2*l]
			require.Equal(t, trace.LayerPoint(l, "attn_out")[len("blocks."):], attn.Label[:1]+".attn_out")
			require.InDelta(t, attn.Logit, s, 1e-4*(1+math.Abs(attn.Logit)), "layer %d", l)
		}
	}
	// The logit difference direction is the difference of the two.
	dir := m.LogitDirection(tok, 0)
	d0, d1 := m.DLA(tr, m.Unembed(tok), -1), m.DLA(tr, m.Unembed(int32(0)), -1)
	for i, c := range m.DLA(tr, dir, -1) {
		require.InDelta(t, d0[i].Logit-d1[i].Logit, c.Logit, 1e-5)
	}
	// The head results sum to the captured attention output.
	res := m.HeadResults(tr, 2)
	out := tr.Tensor("blocks.2.hook_attn_out")
	for p := range res.Shape[0] {
		for i := range res.Shape[2] {
			var s float32
			for h := range res.Shape[1] {
				s += res.At(p, h, i)
			}
			require.InDelta(t, out.At(p, i), s, 1e-4*(1+math.Abs(float64(out.At(p, i)))))
		}
	}
	// accumulated_resid's last entry through the norm is the final logit too.
	acc := m.AccumulatedResid(tr, true)
	require.Equal(t, "final_post", acc.Labels[len(acc.Labels)-1])
	v, err := acc.Dot(m.Unembed(tok), -1)
	require.NoError(t, err)
	require.InDelta(t, float64(logits.At(0, int(tok))), v[len(v)-1], 1e-4*(1+math.Abs(v[len(v)-1])))
	require.Panics(t, func() { m.Token("return err") }, "more than one token")
}

func TestTokenLensEndsAtTheModelsOutput(t *testing.T) {
	m := cpuModel(t)
	prompt := "for i := 0; i < n; i++ {"
	tr := m.Prefill(prompt, nb.Capture("blocks.*.hook_resid_post"), nb.AllLogits())
	tok := tr.Predicted[len(tr.Predicted)-1]
	lens := m.TokenLens(tr, tok)
	last := m.Config().Layers - 1
	T := len(tr.Tokens)
	require.Len(t, lens.Prob, m.Config().Layers)
	require.Equal(t, 0, lens.Rank[last][T-1], "the predicted token is the top one")
	l := tr.Tensor("logits")
	V := l.Shape[1]
	for p := range T {
		want := math.Exp(logSoftmax64(l.Data[p*V:(p+1)*V], int(tok)))
		// The lens recomputes the last layer's logits on the same backend.
		require.InDelta(t, want, lens.Prob[last][p], 1e-5)
		rank := 0
		for _, v := range l.Data[p*V : (p+1)*V] {
			if v > l.Data[p*V+int(tok)] {
				rank++
			}
		}
		require.Equal(t, rank, lens.Rank[last][p], "position %d", p)
	}
	// The top token's probability matches the logit lens's.
	m.LogitLens(tr)
	for layer := range m.Config().Layers {
		top := tr.Lens.Token[layer][T-1]
		got := m.TokenLens(tr, top)
		require.Equal(t, 0, got.Rank[layer][T-1])
		require.InDelta(t, float64(tr.Lens.Prob[layer][T-1]), got.Prob[layer][T-1], 1e-6)
	}
}

// Each DLA component by hand in float64: the component's row at the last
// position, scaled by the final norm of the final residual stream (as
// TransformerLens's apply_ln_to_stack does), times the norm's gain, dotted
// with the token's unembedding.
func TestDLAComponentsByHand(t *testing.T) {
	m := cpuModel(t)
	tr := m.Prefill("if err != nil {\n\treturn", nb.CaptureDLA())
	tok := tr.Predicted[len(tr.Predicted)-1]
	u := m.Unembed(tok)
	last := len(tr.Tokens) - 1
	row := func(name string) []float32 {
		x := tr.Tensor(name)
		require.NotNil(t, x, name)
		return x.Data[last*m.Config().DModel : (last+1)*m.Config().DModel]
	}
	var ss float64
	for _, v := range row(trace.LayerPoint(m.Config().Layers-1, "hook_resid_post")) {
		ss += float64(v) * float64(v)
	}
	inv := 1 / math.Sqrt(ss/float64(m.Config().DModel)+float64(m.Config().NormEps))
	names := []string{"hook_embed"}
	for l := range m.Config().Layers {
		names = append(names, trace.LayerPoint(l, "hook_attn_out"), trace.LayerPoint(l, "hook_mlp_out"))
	}
	dla := m.DLA(tr, u, -1)
	require.Len(t, dla, len(names))
	for i, name := range names {
		want := 0.0
		for j, v := range row(name) {
			want += float64(v) * inv * float64(m.Engine().Model.OutNorm[j]) * float64(u[j])
		}
		// The library rounds each normed component to float32 once before
		// the dot: about 1e-7 relative per term, over d_model terms.
		require.InDelta(t, want, dla[i].Logit, 1e-5*(1+math.Abs(want)), "%s (%s)", dla[i].Label, name)
	}
}

// PatchResid on every layer and position against a host hook that copies
// the clean run's resid_pre row into the corrupted run.
func TestPatchResidIsAHostCopyOfTheCleanRow(t *testing.T) {
	m := cpuModel(t)
	clean, corrupt := "x := a + b; y := a ", "x := a - b; y := a "
	metric := m.LogitDiff("+", "-")
	got := m.PatchResid(clean, corrupt, metric).Patched
	src := m.Prefill(clean, nb.Capture("blocks.*.hook_resid_pre"))
	d := m.Config().DModel
	base, moved := metric(m.Prefill(corrupt)), 0
	require.Len(t, got, m.Config().Layers)
	for l := range m.Config().Layers {
		x := src.Tensor(trace.LayerPoint(l, "hook_resid_pre"))
		require.Len(t, got[l], x.Shape[0])
		for p := range x.Shape[0] {
			host := engine.Hook{Point: trace.LayerPoint(l, "hook_resid_pre"), Host: func(_ string, _ []int, data []float32) error {
				copy(data[p*d:(p+1)*d], x.Data[p*d:(p+1)*d])
				return nil
			}}
			want := metric(m.Prefill(corrupt, nb.Hooks(host)))
			require.InDelta(t, want, got[l][p], 1e-9, "layer %d position %d", l, p)
			if math.Abs(want-base) > 0.1 {
				moved++
			}
		}
	}
	require.GreaterOrEqual(t, moved, m.Config().Layers, "patching the differing token moves the metric in every layer")
}

// nb.Fast reaches the engine: the default model's weights are float16,
// which the CPU backend multiplies in float32 at either precision (its
// int8 products are for quantized weights), so its logits are the exact
// run's, bit for bit.
func TestFastIsExactOnTheCPU(t *testing.T) {
	m := cpuModel(t)
	exact := m.Prefill("func main() {\n\tfmt.Println(", nb.AllLogits())
	fast := m.Prefill("func main() {\n\tfmt.Println(", nb.AllLogits(), nb.Fast())
	require.Equal(t, exact.Tensor("logits").Data, fast.Tensor("logits").Data)
}

// Without nb.CaptureDLA the residual stacks say which option fixes it,
// not only the first point missing.
func TestDLAWithoutItsCapturesNamesTheOption(t *testing.T) {
	m := cpuModel(t)
	tr := m.Prefill("return nil")
	for name, call := range map[string]func(){
		"DecomposeResid":   func() { m.DLA(tr, m.Unembed(" err"), -1) },
		"StackHeadResults": func() { m.HeadDLA(tr, m.Unembed(" err"), -1) },
		"AccumulatedResid": func() { m.AccumulatedResid(tr, false) },
		"FinalNorm":        func() { m.FinalNorm(tr, &trace.Stack{}) },
	} {
		func() {
			defer func() {
				err, ok := recover().(error)
				require.True(t, ok, "%s panics with an error", name)
				require.ErrorIs(t, err, trace.ErrNotCaptured, name)
				require.ErrorContains(t, err, "nb."+name+": trace: ", name)
				require.ErrorContains(t, err, "prefill with nb.CaptureDLA()", name)
			}()
			call()
		}()
	}
}

// The token lens at every layer and position by hand in float64: the
// layer's resid_post through the final RMSNorm and the unembedding, then
// the token's softmax probability and how many logits beat it.
func TestTokenLensByHandAtEveryLayer(t *testing.T) {
	m := cpuModel(t)
	tr := m.Prefill("for i := 0; i < n; i++ {", nb.Capture("blocks.*.hook_resid_post"))
	tok := m.Token(" i")
	lens := m.TokenLens(tr, tok)
	c := m.Config()
	out := make([]float32, c.Vocab*c.DModel)
	m.Engine().Model.Output.Format.Dequantize(out, m.Engine().Model.Output.Data)
	for l := range c.Layers {
		x := tr.Tensor(trace.LayerPoint(l, "hook_resid_post"))
		for p := range x.Shape[0] {
			row := x.Data[p*c.DModel : (p+1)*c.DModel]
			ss := 0.0
			for _, v := range row {
				ss += float64(v) * float64(v)
			}
			inv := 1 / math.Sqrt(ss/float64(c.DModel)+float64(c.NormEps))
			logits := make([]float64, c.Vocab)
			hi := math.Inf(-1)
			for v := range logits {
				for i, xv := range row {
					logits[v] += float64(xv) * inv * float64(m.Engine().Model.OutNorm[i]) * float64(out[v*c.DModel+i])
				}
				hi = max(hi, logits[v])
			}
			z, rank := 0.0, 0
			for _, lv := range logits {
				z += math.Exp(lv - hi)
				if lv > logits[tok] {
					rank++
				}
			}
			// float32 norm and dot on the engine's side: 1e-5 of a probability.
			require.InDelta(t, math.Exp(logits[tok]-hi)/z, lens.Prob[l][p], 1e-5, "layer %d position %d", l, p)
			require.Equal(t, rank, lens.Rank[l][p], "layer %d position %d", l, p)
		}
	}
}

// Each head's direct logit attribution by hand in float64: its slice of
// hook_z times its columns of W_O, through the final norm, dotted with the
// unembedding.
func TestHeadDLAByHand(t *testing.T) {
	m := cpuModel(t)
	tr := m.Prefill("if err != nil {\n\treturn", nb.CaptureDLA())
	u := m.Unembed(" err")
	got := m.HeadDLA(tr, u, -1)
	c := m.Config()
	last := len(tr.Tokens) - 1
	final := tr.Tensor(trace.LayerPoint(c.Layers-1, "hook_resid_post")).Data[last*c.DModel : (last+1)*c.DModel]
	ss := 0.0
	for _, v := range final {
		ss += float64(v) * float64(v)
	}
	inv := 1 / math.Sqrt(ss/float64(c.DModel)+float64(c.NormEps))
	for l := range c.Layers {
		o := m.Engine().Model.Blocks[l].O // [d_model rows, heads*head_dim cols]
		wO := make([]float32, o.Rows*o.Cols)
		o.Format.Dequantize(wO, o.Data)
		z := tr.Tensor(trace.LayerPoint(l, "attn.hook_z")).Data[last*c.Heads*c.HeadDim:]
		for h := range c.Heads {
			want := 0.0
			for i := range c.DModel {
				out := 0.0
				for k := range c.HeadDim {
					out += float64(z[h*c.HeadDim+k]) * float64(wO[i*o.Cols+h*c.HeadDim+k])
				}
				want += out * inv * float64(m.Engine().Model.OutNorm[i]) * float64(u[i])
			}
			require.InDelta(t, want, got[l][h], 1e-5*(1+math.Abs(want)), "L%dH%d", l, h)
		}
	}
}

// GPT-2's final norm is a LayerNorm: DLA centres each component before
// scaling it, learned positions are a component of their own, and the
// components sum to the logit less the norm's bias along the direction.
func TestDLAOnALayerNormModelByHand(t *testing.T) {
	m := openGenerated(t, "tiny-gpt2")

	tr := m.Prefill([]int32{72, 101, 108, 108, 111, 44, 32, 119}, nb.CaptureDLA(), nb.Capture("logits"))
	d, last := m.Config().DModel, len(tr.Tokens)-1
	row := func(name string) []float64 {
		x := tr.Tensor(name)
		require.NotNil(t, x, name)
		out := make([]float64, d)
		for i, v := range x.Data[last*d : (last+1)*d] {
			out[i] = float64(v)
		}
		return out
	}
	mean := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	final := row(trace.LayerPoint(m.Config().Layers-1, "hook_resid_post"))
	mu, ss := mean(final), 0.0
	for _, v := range final {
		ss += (v - mu) * (v - mu)
	}
	inv := 1 / math.Sqrt(ss/float64(d)+float64(m.Config().NormEps))
	tok := tr.Predicted[len(tr.Predicted)-1]
	u := m.Unembed(tok)
	names := []string{"hook_embed", "hook_pos_embed"}
	for l := range m.Config().Layers {
		names = append(names, trace.LayerPoint(l, "hook_attn_out"), trace.LayerPoint(l, "hook_mlp_out"))
	}
	dla := m.DLA(tr, u, -1)
	require.Len(t, dla, len(names))
	require.Equal(t, "pos_embed", dla[1].Label)
	sum := 0.0
	for i, name := range names {
		c := row(name)
		cm, want := mean(c), 0.0
		for j, v := range c {
			want += (v - cm) * inv * float64(m.Engine().Model.OutNorm[j]) * float64(u[j])
		}
		// As in TestDLAComponentsByHand: one float32 rounding per normed term.
		require.InDelta(t, want, dla[i].Logit, 1e-5*(1+math.Abs(want)), "%s", name)
		sum += dla[i].Logit
	}
	bias := 0.0
	for j, b := range m.Engine().Model.OutNormBias {
		bias += float64(b) * float64(u[j])
	}
	logits := tr.Tensor("logits")
	logit := float64(logits.Data[(logits.Shape[0]-1)*m.Config().Vocab+int(tok)])
	// float32 logits of magnitude ~10 from a 256-term float32 dot.
	require.InDelta(t, logit, sum+bias, 1e-4*(1+math.Abs(logit)))
}

// A sweep's options must leave each run a whole prefill of its own: with
// Continue every run appended to the one before (PatchResid gave -3.608
// where -4.440 was right), and Layers narrowed the capture a patch reads.
func TestSweepsRefuseOptionsThatBreakThem(t *testing.T) {
	m := cpuModel(t)
	clean, corrupt := "func add(a, b int) int {\n", "func sub(a, b int) int {\n"
	metric := m.LogitDiff("\n", " ")
	sweeps := map[string]func(...nb.PrefillOption){
		"PatchResid":         func(o ...nb.PrefillOption) { m.PatchResid(clean, corrupt, metric, o...) },
		"PatchPositions":     func(o ...nb.PrefillOption) { m.PatchPositions(clean, corrupt, metric, "hook_mlp_out", o...) },
		"PatchHeads":         func(o ...nb.PrefillOption) { m.PatchHeads(clean, corrupt, metric, o...) },
		"PatchHeadPositions": func(o ...nb.PrefillOption) { m.PatchHeadPositions(clean, corrupt, metric, o...) },
		"AblateHeads":        func(o ...nb.PrefillOption) { m.AblateHeads(clean, metric, nb.ZeroAblation, o...) },
	}
	for name, sweep := range sweeps {
		require.PanicsWithError(t, "nb."+name+": Continue() would append each of the sweep's runs to the one before; a sweep starts every run over, so leave it out",
			func() { sweep(nb.Continue()) }, name)
		require.PanicsWithError(t, "nb."+name+": Layers(1, 2) narrows captures, and the sweep runs over every layer; leave it out",
			func() { sweep(nb.Layers(1, 2)) }, name)
	}
	for name, sweep := range map[string]func(){
		"AblateHeads": func() { m.AblateHeads(clean, nil, nb.ZeroAblation) },
		"PatchResid":  func() { m.PatchResid(clean, corrupt, nil) },
		"PatchHeads":  func() { m.PatchHeads(clean, corrupt, nil) },
	} {
		require.PanicsWithError(t, "nb."+name+": the metric is nil: give a function of a trace, such as m.LogitDiff(good, bad) or m.MeanLoss(0)", sweep)
	}
	require.PanicsWithError(t, "nb.AblateHeads: Ablation(7) is neither nb.ZeroAblation nor nb.MeanAblation",
		func() { m.AblateHeads(clean, metric, nb.Ablation(7)) })
}

// PatchPositions patches each of a layer's points a position at a time, as
// a host hook copying that row of the clean run does; at resid_pre it is
// PatchResid.
func TestPatchPositionsIsAHostCopyOfTheCleanRow(t *testing.T) {
	m := cpuModel(t)
	clean, corrupt := "x := a + b; y := a ", "x := a - b; y := a "
	metric := m.LogitDiff("+", "-")
	require.Equal(t, m.PatchResid(clean, corrupt, metric), m.PatchPositions(clean, corrupt, metric, "hook_resid_pre"))
	for _, point := range []string{"hook_attn_out", "hook_mlp_out", "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_z", "mlp.hook_pre", "mlp.hook_post"} {
		got := m.PatchPositions(clean, corrupt, metric, point)
		src := m.Prefill(clean, nb.Capture("blocks.*."+point))
		require.Len(t, got.Patched, m.Config().Layers)
		for _, l := range []int{0, m.Config().Layers - 1} {
			x := src.Tensor(trace.LayerPoint(l, trace.Point(point)))
			row := len(x.Data) / x.Shape[0]
			for _, p := range []int{0, 3, x.Shape[0] - 1} {
				host := engine.Hook{Point: trace.LayerPoint(l, trace.Point(point)), Host: func(_ string, _ []int, data []float32) error {
					copy(data[p*row:(p+1)*row], x.Data[p*row:(p+1)*row])
					return nil
				}}
				want := metric(m.Prefill(corrupt, nb.Hooks(host)))
				require.InDelta(t, want, got.Patched[l][p], 1e-9, "%s layer %d position %d", point, l, p)
			}
		}
	}
	p := m.PatchPositions(clean, corrupt, metric, "hook_mlp_out")
	require.Equal(t, metric(m.Prefill(clean)), p.Clean)
	require.Equal(t, metric(m.Prefill(corrupt)), p.Corrupt)
	require.PanicsWithError(t, "nb.PatchPositions: \"attn.hook_pattern\" is not one of hook_resid_pre, hook_resid_mid, hook_resid_post, hook_attn_out, hook_mlp_out, attn.hook_q, attn.hook_k, attn.hook_v, attn.hook_z, mlp.hook_pre, mlp.hook_post",
		func() { m.PatchPositions(clean, corrupt, metric, "attn.hook_pattern") })
}

// tryToken is m.Token without the panic; ok is false where it panicked.
func tryToken(m *nb.Model, piece string) (id int32, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return m.Token(piece), true
}

// Tokens are named as m.Pieces shows them or as typed: a tab is `\t` in the
// pieces and "\t" in Go; both find it. The mark token views draw for a
// space is explained when it is typed. Every token is found by its piece,
// the tab and the newline among them, though the two characters backslash
// and t (or n) are tokens of their own in this model.
func TestTokensAsShownAndAsTyped(t *testing.T) {
	m := cpuModel(t)
	for id := range int32(m.Config().Vocab) {
		piece := m.Pieces([]int32{id})[0]
		if got, ok := tryToken(m, piece); ok {
			require.Equal(t, id, got, "token %d, shown as %q", id, piece)
		}
	}
	require.Equal(t, m.Tokens("\t")[1:], []int32{m.Token(`\t`)}, "the tab as shown")
	require.Equal(t, m.Tokens("\n")[1:], []int32{m.Token(`\n`)}, "the newline as shown")
	require.Equal(t, []string{`\\n`}, m.Pieces([]int32{m.Token(`\\n`)}), "backslash and n as shown")
	prompt := "func f() error {\n\treturn nil\n}"
	pieces := m.Pieces(m.Tokens(prompt))
	tab := slices.IndexFunc(pieces, func(p string) bool { return strings.HasPrefix(p, `\t`) })
	require.GreaterOrEqual(t, tab, 0, "a piece starts with a tab: %q", pieces)
	shown := pieces[tab]
	typed := "\t" + strings.TrimPrefix(shown, `\t`)
	require.Equal(t, tab, m.Position(prompt, shown))
	require.Equal(t, tab, m.Position(prompt, typed))
	require.Equal(t, m.Token(typed), m.Token(shown))
	require.Equal(t, shown, m.Pieces([]int32{m.Token(shown)})[0])

	// A backslash in the text shows doubled, so that "\\n" in source code
	// (backslash, n) is not taken for a newline.
	src := `fmt.Println("a\n")`
	pieces = m.Pieces(m.Tokens(src))
	joined := strings.Join(pieces, "")
	require.Contains(t, joined, `\\n`, "%q", pieces)
	require.NotContains(t, strings.ReplaceAll(joined, `\\`, ""), `\n`, "no newline in the text: %q", pieces)
	for i, p := range pieces {
		if strings.Contains(p, `\\`) {
			require.Equal(t, i, m.Position(src, p), "%q as shown", p)
			require.Equal(t, i, m.Position(src, strings.ReplaceAll(p, `\\`, `\`)), "%q as typed", p)
		}
	}

	require.PanicsWithError(t, `nb: "·err" is 3 tokens ["\xC2" "\xB7" "err"], not one (a token may also be given by its id) (in token views · stands for a space)`,
		func() { m.Token("·err") })
	require.Panics(t, func() { m.Position(prompt, "·nil") })
	require.PanicsWithError(t, `nb.Position: no token of the prompt is "x"; its pieces are ["<|endoftext|>" "s" " :=" " \"" "a" "\"\n"]`,
		func() { m.Position("s := \"a\"\n", "x") }, "quotes in pieces are escaped")
}

// TestPrompt, against a float64 softmax of the logits of one prefill of
// prompt and answer: each answer token is rated at the position before it.
func TestTestPromptRatesEachAnswerTokenWhereItIsPredicted(t *testing.T) {
	m := cpuModel(t)
	const prompt, answer = "\tn, err := r.Read(p)\n\tif err != nil {\n\t\treturn n,", " err\n"
	got := m.TestPrompt(prompt, answer, 3)
	ids, whole := m.Tokens(prompt), m.Tokens(prompt+answer)
	require.Equal(t, ids, whole[:len(ids)], "the answer starts a token of its own")
	ans := whole[len(ids):]
	require.Equal(t, m.Pieces(ans), got.Answer)
	require.Equal(t, m.Pieces(ids), got.Prompt)
	tr := m.Prefill(append(slices.Clip(ids), ans...), nb.AllLogits())
	logits := nb.Must(tr.Point("logits"))
	require.Len(t, got.Steps, len(ans))
	for i, id := range ans {
		row := logits.Row(len(ids) - 1 + i)
		var z float64
		for _, v := range row {
			z += math.Exp(float64(v))
		}
		rank := 0
		for _, v := range row {
			if v > row[id] {
				rank++
			}
		}
		s := got.Steps[i]
		require.Equal(t, rank, s.Rank)
		require.Equal(t, row[id], s.Logit)
		// Logits of size ~20: exp in float64 keeps 1e-12 of the sum.
		require.InDelta(t, math.Exp(float64(row[id]))/z, s.Prob, 1e-12)
		require.Len(t, s.Top, 3)
		for j, top := range s.Top {
			require.InDelta(t, math.Exp(float64(top.Logit))/z, top.Prob, 1e-12)
			if j > 0 {
				require.LessOrEqual(t, top.Logit, s.Top[j-1].Logit)
			}
		}
	}
	require.Contains(t, got.String(), `answer token " err": rank 0`)
	require.PanicsWithError(t, "nb.TestPrompt: k is 0; want at least 1", func() { m.TestPrompt(prompt, answer, 0) })
}

// LensTop is the final norm (with each layer's own scale) and the
// unembedding of each layer's resid_post at one position, written here in
// float64 from the captured row, m.Engine().Model.OutNorm and m.Unembed: the engine
// sums 256 float32 products a logit, so 1e-4 of logits near 10 is float32
// rounding, not a difference of method.
func TestLensTopAgainstTheNormAndUnembeddingWrittenOut(t *testing.T) {
	m := cpuModel(t)
	tr := m.Prefill("for i := 0; i < len(s); i++ {\n\tif", nb.Capture("blocks.*.hook_resid_post"), nb.AllLogits())
	const k = 5
	for _, pos := range []int{-1, 3} {
		got := m.LensTop(tr, pos, k)
		p := pos
		if p < 0 {
			p += len(tr.Tokens)
		}
		require.Equal(t, p, got.Position)
		require.Equal(t, m.Pieces(tr.Tokens[p : p+1])[0], got.Token)
		require.Len(t, got.Layers, m.Config().Layers)
		c := m.Config()
		for l, top := range got.Layers {
			x := nb.Must(tr.Resid(l + 1)).Row(p) // resid_post of layer l
			var ss float64
			for _, v := range x {
				ss += float64(v) * float64(v)
			}
			rms := math.Sqrt(ss/float64(c.DModel) + float64(c.NormEps))
			logits := make([]float64, c.Vocab)
			for tok := range logits {
				u := m.Unembed(int32(tok))
				for i, v := range x {
					logits[tok] += float64(v) / rms * float64(m.Engine().Model.OutNorm[i]) * float64(u[i])
				}
			}
			order := make([]int, c.Vocab)
			for i := range order {
				order[i] = i
			}
			slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(logits[b], logits[a]) })
			var sum float64
			for _, v := range logits {
				sum += math.Exp(v - logits[order[0]])
			}
			require.Len(t, top, k)
			for r, tok := range order[:k] {
				require.Equal(t, m.Pieces([]int32{int32(tok)})[0], top[r].Token, "layer %d rank %d", l, r)
				require.InDelta(t, logits[tok], float64(top[r].Logit), 1e-4, "layer %d rank %d", l, r)
				require.InDelta(t, math.Exp(logits[tok]-logits[order[0]])/sum, top[r].Prob, 1e-5, "layer %d rank %d", l, r)
			}
		}
	}
	// The last layer's lens is the model's own output.
	last := m.LensTop(tr, -1, 1).Layers[m.Config().Layers-1][0]
	final := nb.Must(tr.TopLogits(-1, 1))[0]
	require.Equal(t, m.Pieces([]int32{final.ID})[0], last.Token)
	require.PanicsWithError(t, "nb.LensTop: logit lens: position 99 is out of range: the trace has 16 (-1 is the last)", func() { m.LensTop(tr, 99, 1) })
	require.PanicsWithError(t, "nb.LensTop: logit lens: position -17 is out of range: the trace has 16 (-1 is the last)", func() { m.LensTop(tr, -17, 1) })
	require.Contains(t, fmt.Sprint(m.LensTop(tr, -1, 2)), "layer 3: \" s\"")
	all := m.LensTop(tr, -1, math.MaxInt) // k past the vocabulary: all of it
	require.Len(t, all.Layers[0], m.Config().Vocab)
	var sum float64
	for _, r := range all.Layers[0] {
		sum += r.Prob
	}
	require.InDelta(t, 1, sum, 1e-9)

	// A continued prefill's rows count from its own first token, as the
	// argument does; the KV cache's position is said beside.
	ids := m.Tokens("for i := 0; i < len(s); i++ {\n\tif")
	m.Prefill(ids[:10])
	rest := m.Prefill(ids[10:], nb.Continue(), nb.Capture("blocks.*.hook_resid_post"))
	cont := m.LensTop(rest, -1, 3)
	require.Equal(t, len(ids)-11, cont.Position)
	for l, top := range m.LensTop(tr, -1, 3).Layers { // the same position, in one pass: float32 sums in another order
		for r := range top {
			require.Equal(t, top[r].Token, cont.Layers[l][r].Token)
			require.InDelta(t, top[r].Logit, cont.Layers[l][r].Logit, 1e-4)
		}
	}
	require.Contains(t, cont.String(), fmt.Sprintf("logit lens at position %d of this prefill (%d in the KV cache)", len(ids)-11, len(ids)-1))
	require.Equal(t, cont.Layers, m.LensTop(rest, cont.Position, 3).Layers)
}

// TopTokens ranks the last row's logits with their text and a softmax
// written here in float64; Pieces print quoted, leading spaces kept.
func TestTopTokensAndQuotedPieces(t *testing.T) {
	m := cpuModel(t)
	tr := m.Prefill("if err != nil {\n\treturn")
	top := m.TopTokens(tr, -1, 3)
	logits := nb.Must(tr.Rows("logits", 0, 1)).Data
	var mx, sum float64 = math.Inf(-1), 0
	for _, v := range logits {
		mx = max(mx, float64(v))
	}
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	for i, want := range nb.Must(tr.TopLogits(-1, 3)) {
		require.Equal(t, m.Pieces([]int32{want.ID})[0], top[i].Token)
		require.Equal(t, want.Logit, top[i].Logit)
		require.InDelta(t, math.Exp(float64(want.Logit)-mx)/sum, top[i].Prob, 1e-12)
	}
	require.Equal(t, `" nil" 25.2% (logit `, fmt.Sprint(top[0])[:20])
	require.Equal(t, `["<|endoftext|>" "if" " err" " !=" " nil" " {\n" "\treturn"]`, nb.Quote(m.Pieces(tr.Tokens)))
	require.PanicsWithError(t, "nb.TopTokens: position -2 has no logits: the trace has 7 positions (-1 is the last) and logits for the last 1 (prefill with nb.AllLogits() for every one)", func() { m.TopTokens(tr, -2, 3) })
	// Positions are positions: 6 is the last, 0 the first with AllLogits.
	require.Equal(t, top, m.TopTokens(tr, 6, 3))
	all := m.Prefill("if err != nil {\n\treturn", nb.AllLogits())
	require.Equal(t, top, m.TopTokens(all, 6, 3))
	require.Equal(t, m.TopTokens(all, 0, 3), m.TopTokens(all, -7, 3))
	require.NotEqual(t, top, m.TopTokens(all, 0, 3))
}
