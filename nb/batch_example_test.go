package nb_test

import (
	"fmt"

	"github.com/stratalab/strata/nb"
)

// A batch of prompts in one prefill, and metrics over it: the mean with
// each prompt's value kept. Each prompt has its own answer and foil, so
// the logit difference is one metric per prompt. The first prompt's value
// is ExampleModel_LogitDiff's, from its prefill alone.
func ExampleModel_PrefillBatch() {
	m := cpu()
	prompts := []string{
		"if err != nil {\n\treturn",
		"for i := 0; i < n; i++ {\n\tsum +=",
		"x, err := f()\nif err != nil {\n\treturn nil,",
	}
	trs := m.PrefillBatch(prompts, nb.AllLogits())
	diff := nb.MeanOver(trs, m.LogitDiff(" err", " nil"), m.LogitDiff(" i", " n"), m.LogitDiff(" err", " nil"))
	loss := nb.MeanOver(trs, m.MeanLoss(1))
	fmt.Printf("logit diff %.3f per prompt %.3f\n", diff.Mean, diff.PerPrompt)
	fmt.Printf("loss %.3f per prompt %.3f\n", loss.Mean, loss.PerPrompt)
	for _, tr := range trs {
		tr.Close()
	}
	// Output:
	// logit diff -0.035 per prompt [-0.279 0.027 0.146]
	// loss 3.693 per prompt [4.320 2.672 4.086]
}
