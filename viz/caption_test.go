package viz

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/engine"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/recorder"
)

// A caption is drawn once, above the title, larger than it, and the
// figure grows to hold it rather than squeezing the plot.
func TestWithCaptionWritesAboveTheTitle(t *testing.T) {
	f, err := Bars([]string{"a", "b"}, []float64{1, -1}, "the title", "value")
	require.NoError(t, err)
	c := f.WithCaption("L3H0 ablated")
	require.Equal(t, f.Width, c.Width)
	require.Greater(t, c.Height, f.Height)
	require.Same(t, f, f.WithCaption(""), "no caption, the figure itself")

	var rec recorder.Canvas
	c.paint(&rec)
	at := map[string]vg.Point{}
	size := map[string]vg.Length{}
	for _, a := range rec.Actions {
		if s, ok := a.(*recorder.FillString); ok {
			require.NotContains(t, at, s.String, "%q drawn twice", s.String)
			at[s.String], size[s.String] = s.Point, s.Font.Size
		}
	}
	require.Contains(t, at, "L3H0 ablated")
	require.Greater(t, at["L3H0 ablated"].Y, at["the title"].Y, "above the title (y counts up)")
	require.Greater(t, size["L3H0 ablated"], size["the title"])

	long := strings.Repeat("a long caption ", 20)
	require.Greater(t, f.WithCaption(long).Width, f.Width, "widened to fit")
}

func TestHTMLWithCaption(t *testing.T) {
	h, err := TokenValues([]string{"a", "<b>"}, []float64{1, 2}, "loss")
	require.NoError(t, err)
	c := h.WithCaption("plain run <1>")
	require.True(t, strings.HasPrefix(c.Body, `<div class="strata-caption"`))
	require.Contains(t, c.Body, "plain run &lt;1&gt;</div>"+h.Body)
	require.Equal(t, "plain run <1>", c.Title)
}

// No figure draws text under minText: every report figure, at a short
// prompt and at 64 tokens, the generic ones nb.Show draws for plain data,
// bars, lines and a captioned figure, read off the text gonum/plot is
// asked to draw.
func TestNoTextUnderTheMinimum(t *testing.T) {
	m := synthModel(t)
	long := make([]int32, 64)
	for i := range long {
		long[i] = int32(1 + 37*i%1500)
	}
	var figs []*Figure
	for _, tokens := range [][]int32{synthTokens, long} {
		tr := withLens(t, m, prefill(t, m, tokens, engine.CaptureAll()))
		for _, e := range reportFigures(tr) {
			figs = append(figs, must(e.make()))
		}
		for _, c := range genericCases(tr) {
			figs = append(figs, must(c.make()))
		}
	}
	bars := must(Bars([]string{"embed", "0_attn_out"}, []float64{0.5, -1}, "dla", "logit"))
	figs = append(figs, bars, bars.WithCaption("ablated"),
		must(HeadHeatmap([][]float64{{-0.0012, 3.4e-05, 1234, -120}, {0.5, 0.1, 0, 2}}, "values")),
		must(Lines([]float64{0, 1}, []Series{{"clean", []float64{0, 1}}, {"corrupt", []float64{1, 0}}}, "p", "layer", "p")))
	for _, f := range figs {
		var rec recorder.Canvas
		f.paint(&rec)
		drawn := 0
		for _, a := range rec.Actions {
			if s, ok := a.(*recorder.FillString); ok && strings.TrimSpace(s.String) != "" {
				drawn++
				require.GreaterOrEqual(t, float64(s.Font.Size), float64(minText), "%q in %q", s.String, f.Title)
			}
		}
		require.Positive(t, drawn, "%q draws text", f.Title)
	}
}

// PCA's token labels never overlap: at 64 tokens they had piled into one
// another; each label left out is one that would have covered another.
func TestPCALabelsDoNotOverlap(t *testing.T) {
	m := synthModel(t)
	long := make([]int32, 64)
	for i := range long {
		long[i] = int32(1 + 37*i%1500)
	}
	fig := must(PCA(withLens(t, m, prefill(t, m, long, engine.CaptureOf("blocks.*.hook_resid_post")))))
	var rec recorder.Canvas
	fig.paint(&rec)
	var boxes []vg.Rectangle
	for _, a := range rec.Actions {
		s, ok := a.(*recorder.FillString)
		if !ok || s.Font.Size != minText {
			continue
		}
		sty := measured(minText)
		r := vg.Rectangle{Min: s.Point, Max: vg.Point{X: s.Point.X + sty.Width(s.String), Y: s.Point.Y + sty.Height(s.String)}}
		for _, q := range boxes {
			require.False(t, r.Min.X < q.Max.X && q.Min.X < r.Max.X && r.Min.Y < q.Max.Y && q.Min.Y < r.Max.Y, "%q overlaps another label", s.String)
		}
		boxes = append(boxes, r)
	}
	require.Greater(t, len(boxes), 10, "most labels stay")
}
