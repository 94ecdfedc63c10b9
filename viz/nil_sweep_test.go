package viz_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/internal/niltest"
	"github.com/stratalab/strata/viz"
)

// The sweep of issue 47 over nil: every exported function of viz, and
// every exported method of its types on a nil, an empty and a real
// receiver, given nil and zero arguments (and -1 for integers), returns:
// an error or a zero result, never a panic.
func TestEveryExportedCallTakesNil(t *testing.T) {
	api := niltest.Exported(t, ".")
	t.Chdir(t.TempDir()) // what a call given "" writes lands here
	funcs := map[string]any{
		"AttentionHead": viz.AttentionHead, "AttentionGrid": viz.AttentionGrid, "PrevTokenScores": viz.PrevTokenScores,
		"InductionScores": viz.InductionScores, "AttentionView": viz.AttentionView, "Bars": viz.Bars,
		"ExpertUsage": viz.ExpertUsage, "Plot": viz.Plot, "Line": viz.Line, "Heatmap": viz.Heatmap,
		"Tensor": viz.Tensor, "Captured": viz.Captured, "HeadHeatmap": viz.HeadHeatmap,
		"LayerLabels": viz.LayerLabels, "LayerHeadLabels": viz.LayerHeadLabels, "HeadLabels": viz.HeadLabels,
		"LogitLens": viz.LogitLens, "PatchingHeatmap": viz.PatchingHeatmap, "PCA": viz.PCA, "Report": viz.Report,
		"Export": viz.Export, "ExportContext": viz.ExportContext, "ResidNorms": viz.ResidNorms,
		"AttnMLPNorms": viz.AttnMLPNorms, "KVCache": viz.KVCache, "TokenValues": viz.TokenValues,
		"TokenLoss": viz.TokenLoss, "XY": viz.XY, "Lines": viz.Lines,
	}
	line := func() any {
		f, err := viz.Line([]float64{1, 2, 3}, "line")
		require.NoError(t, err)
		return f
	}
	html := func() any {
		h, err := viz.TokenValues([]string{"a", "b"}, []float64{1, 2}, "v")
		require.NoError(t, err)
		return h
	}
	receivers := map[string][]func() any{
		"Figure": {func() any { return (*viz.Figure)(nil) }, func() any { return &viz.Figure{} }, line},
		"HTML":   {func() any { return viz.HTML{} }, html},
	}
	niltest.Sweep(t, "viz", api, funcs, receivers, niltest.Policy{Prefix: "viz: "})
}
