package viz_test

import (
	"fmt"
	"strings"

	"github.com/stratalab/strata/nb"
	"github.com/stratalab/strata/viz"
)

func ExampleTokenLoss() {
	m := nb.Open("", nb.Backend("cpu"))
	tr := m.Prefill("if err != nil {\n\treturn err\n}", nb.AllLogits())
	h, err := viz.TokenLoss(tr) // nb.Show(h) in a notebook
	if err != nil {
		panic(err)
	}
	fmt.Println(strings.Count(h.HTML(), "<span data-i="), "tokens")
	// Output: 10 tokens
}

func ExampleTokenValues() {
	h, _ := viz.TokenValues([]string{"return", " err"}, []float64{-1, 2}, "attribution")
	fmt.Println(strings.Contains(h.Page(), "<!DOCTYPE html>"), strings.Count(h.HTML(), "<span data-i="))
	// Output: true 2
}

func ExampleAttentionView() {
	m := nb.Open("", nb.Backend("cpu"))
	tr := m.Prefill("a b a b", nb.Capture("blocks.*.attn.hook_pattern"))
	h, err := viz.AttentionView(tr, 2, 3) // layers 2 and 3; none: every captured layer
	if err != nil {
		panic(err)
	}
	fmt.Println(strings.Count(h.HTML(), "<option"), "layers,", strings.Count(h.HTML(), `class="head"`), "heads")
	// Output: 2 layers, 8 heads
}
