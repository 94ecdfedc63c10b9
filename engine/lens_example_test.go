package engine_test

import (
	"fmt"

	"github.com/stratalab/strata/nb"
)

func ExampleEngine_TokenLens() {
	m := nb.Open("", nb.Backend("cpu"))
	tr := m.Prefill("if err != nil {\n\treturn", nb.Capture("blocks.*.hook_resid_post"))
	lens, err := m.Engine().TokenLens(tr, m.Token(" err"))
	if err != nil {
		panic(err)
	}
	fmt.Println(lens.Rank[0][len(tr.Tokens)-1], lens.Rank[3][len(tr.Tokens)-1])
	// Output: 52 1
}
