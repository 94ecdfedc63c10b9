package trace_test

import (
	"fmt"
	"sync"

	"github.com/stratalab/strata/nb"
	"github.com/stratalab/strata/trace"
)

// cpu is the embedded default model on the CPU backend, opened once.
var cpu = sync.OnceValue(func() *nb.Model { return nb.Open("", nb.Backend("cpu")) })

func ExampleTrace_TokenLoss() {
	tr := cpu().Prefill("if err != nil {\n\treturn err\n}", nb.AllLogits())
	loss, err := tr.TokenLoss()
	if err != nil {
		panic(err)
	}
	lp, _ := tr.TokenLogProbs()
	mean, _ := tr.MeanLoss(0)
	fmt.Printf("%q -> %q: loss %.2f = -log p %.2f; mean %.2f\n", tr.Pieces[7], tr.Pieces[8], loss[7], -lp[7], mean)
	// Output:
	// " err" -> "\\n": loss 0.19 = -log p 0.19; mean 4.54
}

func ExampleTrace_LogProbs() {
	tr := cpu().Prefill("return nil")
	lp, _ := tr.LogProbs() // last position only, without AllLogits
	_, err := tr.TokenLoss()
	fmt.Println(len(lp), len(lp[0]))
	fmt.Println(err)
	// Output:
	// 1 2048
	// trace: per-token loss needs logits at every position (3), the trace has 1 rows: prefill with nb.AllLogits() (engine.Options{Logits: engine.LogitsAll})
}

func ExampleTrace_Resid() {
	tr := cpu().Prefill("x := 1", nb.Capture("blocks.*.hook_resid_post"))
	r, _ := tr.Resid(4) // the final resid_post
	fmt.Println(r.Name, r.Rows, r.Cols)
	_, err := tr.Resid(0)
	fmt.Println(err)
	// Output:
	// blocks.3.hook_resid_post 5 256
	// trace: Resid(0) needs blocks.0.hook_resid_pre or hook_embed, not captured; capture with nb.Capture("blocks.*.hook_resid_pre")
}

func ExampleTrace_Head() {
	tr := cpu().Prefill("x := 1", nb.Capture("blocks.0.attn.hook_z", "blocks.0.attn.hook_k"))
	z, _ := tr.Head("z", 0, 5)
	k, _ := tr.Head("k", 0, 1) // a KV head
	fmt.Println(z.Name, z.Rows, z.Cols, "|", k.Name)
	// Output:
	// blocks.0.attn.hook_z head 5 5 32 | blocks.0.attn.hook_k head 1
}

func ExampleTrace_Pattern() {
	tr := cpu().Prefill("a b a b", nb.Capture("blocks.*.attn.hook_pattern"))
	p, _ := tr.Pattern(2, 3) // a previous-token head: each row peaks one left of the diagonal
	for _, row := range p.Slices() {
		fmt.Printf("%.2f\n", row)
	}
	fmt.Println(p.Dense().At(1, 0) == float64(p.At(1, 0)))
	// Output:
	// [1.00 0.00 0.00 0.00 0.00]
	// [0.99 0.01 0.00 0.00 0.00]
	// [0.11 0.85 0.04 0.00 0.00]
	// [0.00 0.11 0.84 0.05 0.00]
	// [0.00 0.00 0.09 0.85 0.05]
	// true
}

func ExampleTrace_Point() {
	tr := cpu().Prefill("x := 1", nb.Capture("blocks.1.attn.hook_q"))
	q, _ := tr.Point("blocks.1.attn.hook_q") // [T, heads*head_dim]
	fmt.Println(q.Rows, q.Cols)
	// Output:
	// 5 256
}

func ExampleHeadScores() {
	m := cpu()
	tr := m.Prefill(m.RepeatedRandom(30, 2), nb.Capture("blocks.*.attn.hook_pattern"))
	for _, kind := range []trace.HeadKind{trace.Induction, trace.PrevToken, trace.DuplicateToken} {
		s, err := trace.HeadScores(tr, kind)
		if err != nil {
			panic(err)
		}
		fmt.Println(kind, s.Top(2))
	}
	// Output:
	// induction L3H1 0.516, L3H0 0.483
	// previous-token L2H3 0.764, L2H2 0.341
	// duplicate-token L2H6 0.061, L1H0 0.054
}

func ExampleTrace_DecomposeResid() {
	m := cpu()
	tr := m.Prefill("return nil", nb.CaptureDLA())
	dec, _ := tr.DecomposeResid()
	final, _ := tr.Resid(m.Config().Layers)
	normed, _ := dec.ApplyFinalNorm(final, m.Engine().Model.OutNorm, m.Config().NormEps)
	dla, _ := normed.Dot(m.Unembed("\n"), -1)
	sum := 0.0
	for _, v := range dla {
		sum += v
	}
	logits := m.Prefill("return nil").Tensor("logits")
	fmt.Printf("components sum to %.3f, the logit is %.3f\n", sum, logits.At(0, int(m.Token("\n"))))
	// Output:
	// components sum to 6.441, the logit is 6.441
}

func ExampleTrace_HeadResults() {
	m := cpu()
	tr := m.Prefill("return nil", nb.Capture("blocks.2.attn.hook_z"))
	wO := make([]float32, m.Config().DModel*m.Config().Heads*m.Config().HeadDim)
	o := m.Engine().Model.Blocks[2].O
	o.Format.Dequantize(wO, o.Data)
	r, _ := tr.HeadResults(2, wO)
	fmt.Println(r.Shape)
	// Output:
	// [3 8 256]
}

func ExampleScores_Top() {
	s := trace.Scores{{0.1, 0.7}, {0.9, 0.2}} // [layer][head]
	fmt.Println(s.Top(2), s.Best(), len(s.Ranked()))
	// Output: L1H0 0.900, L0H1 0.700 L1H0 0.900 4
}

func ExampleDuplicateTokenScores() {
	// One head, tokens 5 6 5: position 2 puts 0.75 on position 0, the
	// earlier 5.
	p := &trace.Tensor{Shape: []int{1, 3, 3}, Data: []float32{1, 0, 0, 0.5, 0.5, 0, 0.75, 0, 0.25}}
	s, _ := trace.DuplicateTokenScores(p, []int32{5, 6, 5})
	fmt.Println(s)
	// Output: [0.75]
}

func ExampleProbRank() {
	p, rank := trace.ProbRank([]float32{2, 0, 1}, 2)
	fmt.Printf("%.3f %d\n", p, rank)
	// Output: 0.245 1
}

func ExampleStack_Dot() {
	m := cpu()
	tr := m.Prefill("return nil", nb.Capture("blocks.*.hook_resid_post", "hook_embed"))
	acc, _ := tr.AccumulatedResid()
	normed, _ := acc.ApplyFinalNorm(acc.X[len(acc.X)-1], m.Engine().Model.OutNorm, m.Config().NormEps)
	v, _ := normed.Dot(m.Unembed("\n"), -1) // a logit lens for "\n" along the stream
	fmt.Printf("%s %.2f\n", normed.Labels[len(v)-1], v[len(v)-1])
	// Output: final_post 6.44
}

func ExampleTrace_RowNorms() {
	tr := cpu().Prefill("x := 1", nb.Capture("blocks.3.hook_resid_post"))
	defer tr.Close()
	n, _ := tr.RowNorms("blocks.3.hook_resid_post") // on a GPU trace, taken on the device: T floats come back
	fmt.Printf("%.1f\n", n)
	// Output:
	// [76.4 57.8 52.7 61.6 61.6]
}
