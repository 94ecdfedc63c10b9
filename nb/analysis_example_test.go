package nb_test

import (
	"fmt"
	"sync"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/nb"
	"github.com/stratalab/strata/trace"
)

// cpu is the default model on the CPU backend, opened once for the examples.
var cpu = sync.OnceValue(func() *nb.Model { return nb.Open("", nb.Backend("cpu")) })

func ExampleModel_Loss() {
	m := cpu()
	loss := m.Loss("if err != nil {\n\treturn err\n}")
	fmt.Printf("%d losses; predicting \"err\" after \"return\": %.2f\n", len(loss), loss[len(loss)-3])
	// Output:
	// 9 losses; predicting "err" after "return": 1.66
}

func ExampleModel_MeanLoss() {
	m := cpu()
	tr := m.Prefill(m.RepeatedRandom(20, 1), nb.AllLogits()) // BOS, then 20 random tokens twice
	// loss[i] is the loss of predicting token i+1: from 20 on, the second copy.
	fmt.Printf("whole prompt %.1f, second copy %.1f\n", m.MeanLoss(0)(tr), m.MeanLoss(20)(tr))
	// Output:
	// whole prompt 12.9, second copy 10.7
}

func ExampleModel_HeadScores() {
	m := cpu()
	s := m.HeadScores(m.RepeatedRandom(40, 7), nb.Induction)
	fmt.Println(s.Top(3))
	fmt.Println(m.HeadScores(m.RepeatedRandom(40, 7), nb.PrevToken).Best())
	// Output:
	// L3H0 0.609, L3H1 0.484, L3H5 0.101
	// L2H3 0.788
}

func ExampleMust() {
	m := cpu()
	tr := m.Prefill("x := y", nb.Capture("blocks.3.attn.hook_pattern"))
	p := nb.Must(tr.Pattern(3, 0))
	fmt.Println(p.Rows, p.Cols, p.Row(0)[0])
	// Output:
	// 4 4 1
}

func ExampleModel_Token() {
	m := cpu()
	id := m.Token("err")
	fmt.Println(id, m.Pieces([]int32{id}), len(m.Unembed(id)))
	// Output:
	// 299 [err] 256
}

func ExampleModel_DLA() {
	m := cpu()
	tr := m.Prefill("if err != nil {\n\treturn", nb.CaptureDLA())
	for _, c := range m.DLA(tr, m.LogitDirection(" err", " nil"), -1) {
		fmt.Println(c)
	}
	// Output:
	// embed -0.289
	// 0_attn_out +0.004
	// 0_mlp_out -1.334
	// 1_attn_out +0.577
	// 1_mlp_out -1.260
	// 2_attn_out +3.061
	// 2_mlp_out -1.120
	// 3_attn_out +0.360
	// 3_mlp_out -0.277
}

func ExampleModel_HeadDLA() {
	m := cpu()
	tr := m.Prefill("if err != nil {\n\treturn", nb.CaptureDLA())
	fmt.Println(m.HeadDLA(tr, m.LogitDirection(" err", " nil"), -1).Top(2))
	// Output:
	// L2H4 2.646, L3H4 0.431
}

func ExampleModel_DecomposeResid() {
	m := cpu()
	tr := m.Prefill("return nil", nb.CaptureDLA())
	s := m.DecomposeResid(tr, true)
	fmt.Println(s.Labels)
	fmt.Println(m.AccumulatedResid(tr, false).Labels)
	fmt.Println(len(m.StackHeadResults(tr, true).Labels), m.HeadResults(tr, 0).Shape[1:])
	// Output:
	// [embed 0_attn_out 0_mlp_out 1_attn_out 1_mlp_out 2_attn_out 2_mlp_out 3_attn_out 3_mlp_out]
	// [0_pre 1_pre 2_pre 3_pre final_post]
	// 32 [8 256]
}

func ExampleModel_TokenLens() {
	m := cpu()
	tr := m.Prefill("if err != nil {\n\treturn", nb.Capture("blocks.*.hook_resid_post"))
	lens := m.TokenLens(tr, " err")
	for l := range lens.Prob {
		last := len(lens.Prob[l]) - 1
		fmt.Printf("layer %d: p(%q) = %.2f, rank %d\n", l, lens.Piece, lens.Prob[l][last], lens.Rank[l][last])
	}
	// Output:
	// layer 0: p(" err") = 0.00, rank 52
	// layer 1: p(" err") = 0.01, rank 12
	// layer 2: p(" err") = 0.28, rank 1
	// layer 3: p(" err") = 0.19, rank 1
}

func ExampleModel_NeuronDLA() {
	m := cpu()
	tr := m.Prefill("\tn, err := r.Read(p)\n\tif err != nil {\n\t\treturn n,", nb.CaptureNeuronDLA())
	neurons := m.NeuronDLA(tr, m.LogitDirection(" err", " nil"), -1)
	fmt.Println("for:", neurons.Top(2))
	fmt.Println("against:", neurons.Bottom(2))
	// Output:
	// for: L3N304 +0.777, L3N113 +0.623
	// against: L3N388 -0.810, L3N261 -0.794
}

func ExampleModel_TopTokens() {
	m := cpu()
	tr := m.Prefill("if err != nil {\n\treturn")
	fmt.Println(m.TopTokens(tr, -1, 2))
	// Output:
	// [" nil" 25.2% (logit 11.63) " err" 19.1% (logit 11.35)]
}

func ExampleModel_LensTop() {
	m := cpu()
	tr := m.Prefill("if err != nil {\n\treturn", nb.Capture("blocks.*.hook_resid_post"))
	fmt.Print(m.LensTop(tr, -1, 3))
	// Output:
	// logit lens at position 6, after "\treturn":
	//   layer 0: " nil" 27.0% " fmt" 25.3% " &" 11.2%
	//   layer 1: " nil" 55.0% " false" 18.4% " true" 6.5%
	//   layer 2: " nil" 46.8% " err" 27.9% " false" 4.4%
	//   layer 3: " nil" 25.2% " err" 19.1% "\n" 8.1%
}

func ExampleModel_SteeringVector() {
	m := cpu()
	v := m.SteeringVector("var x string", "var x int", 1, -1)
	steered := m.Prefill("func f() ", nb.Steer(1, v, 4))
	same := m.Prefill("func f() ", nb.Hooks(engine.AddVector(trace.LayerPoint(1, "hook_resid_pre"), v, 4, nil)))
	plain := m.Prefill("func f() ")
	fmt.Println(len(v), m.Pieces(plain.Predicted), m.Pieces(steered.Predicted), m.Pieces(same.Predicted))
	// Output:
	// 256 [~] [ID] [ID]
}

func ExampleModel_AblateHeads() {
	m := cpu()
	prompt := "func add(a, b int) int {\n\treturn a + b\n"
	change := m.AblateHeads(prompt, m.LogitDiff("}", ")"), nb.ZeroAblation)
	fmt.Println(change.Ranked()[len(change.Ranked())-1], "hurts the most")
	// Output:
	// L1H2 -3.032 hurts the most
}

func ExampleModel_PatchHeads() {
	m := cpu()
	p := m.PatchHeads("x := a + b; y := a ", "x := a - b; y := a ", m.LogitDiff("+", "-"))
	fmt.Printf("clean %.2f, corrupt %.2f\n", p.Clean, p.Corrupt)
	n := p.Normalized()
	fmt.Printf("layer 0: %.2f\n", n[0])
	// Output:
	// clean -1.77, corrupt -2.36
	// layer 0: [-0.34 0.15 -0.26 0.48 -0.27 -0.25 -0.12 0.15]
}

func Example_patchHead() {
	m := cpu()
	clean := m.Prefill("x := a + b", nb.Capture("blocks.*.attn.hook_z"))
	tr := m.Prefill("x := a - b", nb.Hooks(engine.PatchHead(3, 0, clean)))
	fmt.Println(m.Pieces(tr.Predicted))
	// Output:
	// [\n]
}

// plusZero turns -0 (0 divided by a negative clean-corrupt gap) into 0 for printing.
func plusZero(x []float64) []float64 {
	for i := range x {
		x[i] += 0
	}
	return x
}

func ExampleModel_LogitDirection() {
	m := cpu()
	tr := m.Prefill("if err != nil {\n\treturn")
	row := tr.Tensor("logits")
	dir := m.LogitDirection(" err", " nil") // dot it with a stack: m.DLA(tr, dir, -1)
	fmt.Printf("%d %.2f\n", len(dir), row.At(0, int(m.Token(" err")))-row.At(0, int(m.Token(" nil"))))
	// Output: 256 -0.28
}

func ExampleModel_FinalNorm() {
	m := cpu()
	tr := m.Prefill("return nil", nb.CaptureDLA())
	raw := nb.Must(tr.DecomposeResid()) // the same as m.DecomposeResid(tr, false)
	normed := m.FinalNorm(tr, raw)
	fmt.Println(len(normed.X), normed.Labels[0])
	// Output: 9 embed
}

func ExampleSteer() {
	m := cpu()
	v := m.SteeringVector("// error", "// value", 2, -1)
	tr := m.Prefill("x := ", nb.Steer(2, v, 8))
	fmt.Println(len(tr.Predicted))
	// Output: 1
}

func ExamplePatching_Normalized() {
	p := nb.Patching{Patched: [][]float64{{2, 4}}, Clean: 4, Corrupt: 2}
	fmt.Println(p.Normalized())
	// Output: [[0 1]]
}

func ExampleModel_Position() {
	m := cpu()
	down, up := "for i := n; i > 0; i", "for i := n; i < 0; i"
	vec := m.SteeringVector(down, up, 1, m.Position(down, " >"))
	prompt := "for j := 0; j < m; j"
	steered := m.Prefill(prompt, nb.Steer(1, vec, 1.5, m.Position(prompt, " <")))
	fmt.Println(m.Position(prompt, " <"), m.Pieces(m.Prefill(prompt).Predicted), m.Pieces(steered.Predicted))
	// Output:
	// 8 [++] [--]
}

func ExampleModel_PatchResid() {
	m := cpu()
	metric := m.LogitDiff(" b", " c")
	res := m.PatchResid("x := a + b", "x := a - b", metric) // [layer][position]
	fmt.Printf("clean %.2f, corrupt %.2f\n", res.Clean, res.Corrupt)
	fmt.Printf("position 4 (the token that differs) patched at layer 0: %.2f, at layer 3: %.2f\n", res.Patched[0][4], res.Patched[3][4])
	// Layer 0 is the embedding: only the token that differs matters.
	fmt.Printf("%.2f\n", plusZero(res.Normalized()[0]))
	// Output:
	// clean -0.15, corrupt 0.80
	// position 4 (the token that differs) patched at layer 0: -0.15, at layer 3: -0.42
	// [0.00 0.00 0.00 0.00 1.00 0.00]
}

func ExampleModel_Unembed() {
	m := cpu()
	u := m.Unembed(" err") // the token's row of the unembedding: its direction in the residual stream
	tr := m.Prefill("if err != nil {\n\treturn", nb.CaptureDLA())
	sum := 0.0
	for _, c := range m.DLA(tr, u, -1) {
		sum += c.Logit
	}
	fmt.Printf("%d values; the components' sum %.3f, the logit %.3f\n", len(u), sum, tr.Tensor("logits").At(0, int(m.Token(" err"))))
	// Output:
	// 256 values; the components' sum 11.349, the logit 11.349
}

func ExampleModel_HeadResults() {
	m := cpu()
	tr := m.Prefill("return nil", nb.CaptureDLA())
	r := m.HeadResults(tr, 2) // [position, head, d_model]: what each head writes
	fmt.Println(r.Shape)
	// Output:
	// [3 8 256]
}

func ExampleModel_AccumulatedResid() {
	m := cpu()
	tr := m.Prefill("\tn, err := r.Read(p)\n\tif err != nil {\n\t\treturn n,", nb.CaptureDLA())
	s := m.AccumulatedResid(tr, true) // the residual stream before each layer, through the final norm
	v := nb.Must(s.Dot(m.LogitDirection(" err", " nil"), -1))
	for i, l := range s.Labels {
		fmt.Printf("%s %.2f\n", l, v[i])
	}
	// Output:
	// 0_pre -0.32
	// 1_pre -0.31
	// 2_pre 0.95
	// 3_pre 1.29
	// final_post 4.60
}

func ExampleModel_StackHeadResults() {
	m := cpu()
	tr := m.Prefill("\tn, err := r.Read(p)\n\tif err != nil {\n\t\treturn n,", nb.CaptureDLA())
	s := m.StackHeadResults(tr, true) // one component per head, through the final norm
	v := nb.Must(s.Dot(m.LogitDirection(" err", " nil"), -1))
	fmt.Println(len(s.Labels), s.Labels[:3])
	fmt.Printf("%s %.2f\n", s.Labels[20], v[20])
	// Output:
	// 32 [L0H0 L0H1 L0H2]
	// L2H4 2.90
}

func ExampleModel_CompositionScores() {
	m := cpu()
	// Which earlier heads' outputs the induction head L3H0 reads with its keys.
	fmt.Println(m.CompositionScores(3, 0, nb.KComposition).Top(2))
	// Output:
	// L2H3 0.197, L2H2 0.187
}

func ExampleModel_CopyingScores() {
	m := cpu()
	// The heads whose OV circuits copy most: the induction head L3H0 first.
	fmt.Println(m.CopyingScores().Top(3))
	// Output:
	// L3H0 0.978, L3H1 0.972, L3H5 0.943
}

func ExampleModel_TestPrompt() {
	m := cpu()
	t := m.TestPrompt("\tif err != nil {\n\t\treturn", " err", 2)
	s := t.Steps[0]
	fmt.Printf("%q: rank %d, %.0f%%; the model's first choice %q, %.0f%%\n", s.Token, s.Rank, 100*s.Prob, s.Top[0].Token, 100*s.Top[0].Prob)
	// Output:
	// " err": rank 1, 12%; the model's first choice " nil", 68%
}

func ExampleSample() {
	m := cpu()
	draw := func(seed uint64) string {
		return m.Generate("func main() {", 6, nb.Sample(engine.Sampler{Temperature: 0.8, TopP: 0.95, Seed: seed})).Text
	}
	fmt.Println(draw(1) == draw(1), draw(1) == draw(2))
	// Output:
	// true false
}
