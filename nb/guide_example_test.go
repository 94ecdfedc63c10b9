package nb_test

// The examples docs/TRANSFORMERLENS.md points to: each runs the Strata call
// the guide puts beside a TransformerLens one, on the default model.

import (
	"fmt"
	"slices"

	"gonum.org/v1/gonum/mat"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/nb"
	"github.com/stratalab/strata/trace"
)

func ExampleOpen() {
	m := nb.Open("", nb.Backend("cpu")) // HookedTransformer.from_pretrained
	defer m.Close()
	c := m.Config() // model.cfg
	fmt.Printf("%s: %d layers, %d heads of %d, d_model %d, vocabulary %d\n", c.Arch, c.Layers, c.Heads, c.HeadDim, c.DModel, c.Vocab)
	// Output:
	// qwen3: 4 layers, 8 heads of 32, d_model 256, vocabulary 2048
}

func ExampleTryOpen() {
	_, err := nb.TryOpen("", nb.Backend("cpu"), nb.Backend("vulkan"))
	fmt.Println(err)
	// Output:
	// nb: open "": one backend, not 2 (["cpu" "vulkan"]): to split a model over devices, use Placement
}

func ExampleModel_Tokens() {
	m := cpu()
	ids := m.Tokens("return err") // model.to_tokens: BOS first, as this tokenizer adds one
	fmt.Println(ids, nb.Quote(m.Pieces(ids)))
	fmt.Println(slices.Equal(ids, m.Tokens(ids)), "(ids are taken as they are)")
	// Output:
	// [2047 314 315] ["<|endoftext|>" "return" " err"]
	// true (ids are taken as they are)
}

func ExampleModel_ToString() {
	m := cpu()
	ids := m.Tokens("if err != nil {")
	fmt.Printf("%q\n", m.ToString(ids))       // model.to_string: the BOS decodes to nothing
	fmt.Println(nb.Quote(m.Pieces(ids[1:3]))) // model.to_str_tokens
	// Output:
	// "if err != nil {"
	// ["if" " err"]
}

// run_with_cache and cache indexing.
func ExampleModel_Prefill() {
	m := cpu()
	tr := m.Prefill("for i := range n {", nb.Capture("*"), nb.AllLogits()) // logits, cache = model.run_with_cache(p)
	resid := nb.Must(tr.Resid(3))                                          // cache["resid_pre", 3]
	pattern := nb.Must(tr.Pattern(2, 5))                                   // cache["pattern", 2][5]
	z := nb.Must(tr.Head("z", 1, 0))                                       // cache["z", 1][:, 0]
	mlp := nb.Must(tr.Get(trace.LayerPoint(0, "hook_mlp_out")))            // cache["blocks.0.hook_mlp_out"]
	logits := nb.Must(tr.Get("logits"))
	fmt.Println(len(tr.Tokens), "tokens")
	fmt.Println(resid.Rows, resid.Cols, pattern.Rows, pattern.Cols, z.Rows, z.Cols, mlp.Shape, logits.Shape)
	// Output:
	// 7 tokens
	// 7 256 7 7 7 32 [7 256] [7 2048]
}

// A hand-written hook, TransformerLens's run_with_hooks with a hook on
// hook_z: HeadAt is the head's slice, z[pos, head, :].
func ExampleHeadAt() {
	m := cpu()
	zero := engine.Hook{Point: trace.LayerPoint(2, "attn.hook_z"), Host: func(_ string, shape []int, z []float32) error {
		for pos := range shape[0] {
			clear(nb.HeadAt(shape, z, pos, 4))
		}
		return nil
	}}
	prompt := "if err != nil {\n\treturn"
	byHand := m.Prefill(prompt, nb.Hooks(zero))
	builtIn := m.Prefill(prompt, nb.Hooks(engine.AblateHead(2, 4)))
	fmt.Println(slices.Equal(nb.Must(byHand.Get("logits")).Data, nb.Must(builtIn.Get("logits")).Data))
	// Output:
	// true
}

// The logit lens: row l is after layer l, so the last row is the model's
// own prediction.
func ExampleModel_LogitLens() {
	m := cpu()
	tr := m.LogitLens(m.Prefill("if err != nil {\n\treturn", nb.Capture("blocks.*.hook_resid_post")))
	last := len(tr.Tokens) - 1
	for l := range tr.Lens.Token {
		fmt.Printf("after layer %d: %q %.2f\n", l, tr.Lens.Piece[l][last], tr.Lens.Prob[l][last])
	}
	fmt.Println(tr.Lens.Token[len(tr.Lens.Token)-1][last] == tr.Predicted[0]) // the last position's
	// Output:
	// after layer 0: " nil" 0.27
	// after layer 1: " nil" 0.55
	// after layer 2: " nil" 0.47
	// after layer 3: " nil" 0.25
	// true
}

// The two indexings: the lens has a row per layer, after it;
// AccumulatedResid a row before each layer and the final one.
func Example_lensAndAccumulatedResid() {
	m := cpu()
	tr := m.Prefill("return nil", nb.CaptureDLA())
	m.LogitLens(tr)
	fmt.Println(len(tr.Lens.Prob), "lens rows; accumulated_resid:", m.AccumulatedResid(tr, true).Labels)
	// Output:
	// 4 lens rows; accumulated_resid: [0_pre 1_pre 2_pre 3_pre final_post]
}

func ExampleModel_LogitDiff() {
	m := cpu()
	metric := m.LogitDiff(" err", " nil") // logits[0, -1, err] - logits[0, -1, nil]
	tr := m.Prefill("if err != nil {\n\treturn")
	logits := nb.Must(tr.Get("logits"))
	fmt.Printf("%.3f %.3f\n", metric(tr), logits.Data[m.Token(" err")]-logits.Data[m.Token(" nil")])
	// Output:
	// -0.279 -0.279
}

func ExampleModel_RepeatedRandom() {
	m := cpu()
	ids := m.RepeatedRandom(10, 1) // BOS, then 10 random tokens twice
	fmt.Println(len(ids), m.Pieces(ids[:1]), slices.Equal(ids[1:11], ids[11:]))
	// Output:
	// 21 [<|endoftext|>] true
}

func ExampleModel_PatchPositions() {
	m := cpu()
	p := m.PatchPositions("x := a + b", "x := a - b", m.LogitDiff(" b", " c"), "hook_attn_out") // get_act_patch_attn_out
	n := p.Normalized()
	b := n.Best() // a cell of a [layer][position] result: its Head is the position
	fmt.Printf("%d layers x %d positions; the most restoring cell: layer %d, position %d, %.2f\n", len(n), len(n[0]), b.Layer, b.Head, b.Score)
	// Output:
	// 4 layers x 6 positions; the most restoring cell: layer 3, position 5, 0.99
}

func ExampleModel_PatchHeadPositions() {
	m := cpu()
	p := m.PatchHeadPositions("x := a + b", "x := a - b", m.LogitDiff(" b", " c")) // get_act_patch_attn_head_out_by_pos
	fmt.Printf("%d rows (layer x head) x %d positions\n", len(p.Patched), len(p.Patched[0]))
	// Output:
	// 32 rows (layer x head) x 6 positions
}

func ExampleModel_WE() {
	m := cpu()
	e := m.WE(" err", " nil") // model.W_E[[err, nil]]
	r, c := e.Dims()
	fmt.Println(r, c)
	// Output:
	// 2 256
}

func ExampleModel_WU() {
	m := cpu()
	u := m.WU(" err") // model.W_U[:, [err]], before fold_ln
	r, c := u.Dims()
	fmt.Println(r, c, mat.Col(nil, 0, u)[7] == float64(m.Unembed(" err")[7]))
	// Output:
	// 256 1 true
}

func ExampleModel_WO() {
	m := cpu()
	o := m.WO(2, 4) // model.W_O[2, 4]
	r, c := o.Dims()
	fmt.Println(r, c, mat.Equal(o, m.HeadWeights(2, 4).O))
	// Output:
	// 32 256 true
}

func ExampleModel_HeadWeights() {
	m := cpu()
	w := m.HeadWeights(3, 0) // W_Q, W_K, W_V, W_O of L3H0, the norm's gain folded in (fold_ln)
	for _, x := range []*mat.Dense{w.Q, w.K, w.V, w.O} {
		r, c := x.Dims()
		fmt.Print(r, "x", c, " ")
	}
	fmt.Println()
	// Output:
	// 256x32 256x32 256x32 32x256
}

func ExampleModel_Generate() {
	m := cpu()
	g := m.Generate("func main() {", 8) // model.generate(p, max_new_tokens=8, do_sample=False)
	fmt.Printf("%q %v\n", g, g.Stop)
	// Output:
	// " goos.Stdout.Close() }\n" length
}

// Stepping a prefill a layer at a time.
func ExampleModel_Start() {
	m := cpu()
	s := m.Start("x := 1")
	for s.Next() {
		fmt.Print(s.Layer(), " ")
	}
	fmt.Println(s.Err(), len(s.Finish().Predicted))
	// Output:
	// 0 1 2 3 <nil> 1
}
