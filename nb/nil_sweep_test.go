package nb_test

import (
	"testing"

	"github.com/stratalab/strata/internal/niltest"
	"github.com/stratalab/strata/nb"
	"github.com/stratalab/strata/trace"
)

// The sweep of issue 47 over nil: every exported function of nb, and every
// exported method of its types on a nil and a real receiver, given nil and
// zero arguments (and -1 for integers), returns or panics with an error,
// as nb's calls fail in a cell: never a nil dereference, an index out of
// range or a hang.
func TestEveryExportedCallTakesNil(t *testing.T) {
	api := niltest.Exported(t, ".")
	t.Chdir(t.TempDir()) // what Show writes outside a notebook lands here
	funcs := map[string]any{
		"Must": nb.Must[int], "CaptureDLA": nb.CaptureDLA, "CaptureNeuronDLA": nb.CaptureNeuronDLA,
		"Steer": nb.Steer, "MeanOver": nb.MeanOver, "Explore": nb.Explore, "Backend": nb.Backend,
		"Placement": nb.Placement, "Open": nb.Open, "TryOpen": nb.TryOpen, "Capture": nb.Capture,
		"Layers": nb.Layers, "Hooks": nb.Hooks, "PromptHooks": nb.PromptHooks, "AllLogits": nb.AllLogits,
		"Budget": nb.Budget, "Sample": nb.Sample, "Fast": nb.Fast, "Continue": nb.Continue,
		"Context": nb.Context, "Quote": nb.Quote, "Repr": nb.Repr, "Show": nb.Show,
		"ShowTensor": nb.ShowTensor, "HeadAt": nb.HeadAt,
	}
	open := func() any {
		m := nb.Open("", nb.Backend("cpu"))
		t.Cleanup(func() { m.Close() })
		return m
	}
	steps := func() any {
		s := open().(*nb.Model).Start("func main() {")
		t.Cleanup(s.Close)
		return s
	}
	patching := func() any {
		m := open().(*nb.Model)
		return m.PatchResid("x := 1", "x := 2", func(tr *trace.Trace) float64 { return float64(tr.Predicted[0]) })
	}
	receivers := map[string][]func() any{
		"Model":        {func() any { return (*nb.Model)(nil) }, open},
		"Steps":        {func() any { return (*nb.Steps)(nil) }, steps},
		"Patching":     {func() any { return (*nb.Patching)(nil) }, patching},
		"Ablation":     {func() any { return nb.Ablation(0) }},
		"BatchMetric":  {func() any { return nb.BatchMetric{} }},
		"Caption":      {func() any { return nb.Caption("") }},
		"Composition":  {func() any { return nb.Composition(0) }},
		"Contribution": {func() any { return nb.Contribution{} }},
		"Generated":    {func() any { return nb.Generated{} }},
		"HeadMeans":    {func() any { return nb.HeadMeans(nil) }},
		"LensRanking":  {func() any { return nb.LensRanking{} }},
		"NeuronList":   {func() any { return nb.NeuronList(nil) }},
		"NeuronScore":  {func() any { return nb.NeuronScore{} }},
		"NeuronScores": {func() any { return nb.NeuronScores(nil) }},
		"PromptTest":   {func() any { return nb.PromptTest{} }},
		"RankedToken":  {func() any { return nb.RankedToken{} }},
	}
	niltest.Sweep(t, "nb", api, funcs, receivers, niltest.Policy{ErrorPanics: true})
}
