package nb

import (
	"bytes"
	"errors"
	"image"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/trace"
	"github.com/stratalab/strata/viz"
)

// In a notebook a figure is inline SVG at its PNG's size: not shrunk by
// the notebook's max-width rule, scrolled when wider than the output.
func TestFigureHTMLKeepsTheFiguresSize(t *testing.T) {
	f, err := viz.Heatmap([][]float64{{1, 2, 3}}, nil, nil, "t")
	require.NoError(t, err)
	h, err := figureHTML(f)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(h, `<div class="strata-figure" style="overflow-x:auto"><svg style="max-width:none;height:auto" `), h[:80])
	require.True(t, strings.HasSuffix(h, "</svg>\n</div>"))
	require.NotContains(t, h, "<?xml")
	w, _ := f.PixelSize()
	require.Contains(t, h, ` width="`+strconv.Itoa(w)+`px"`)
	require.Contains(t, h, `<image preserveAspectRatio="none"`)

	_, err = figureHTML(badFigure{})
	require.ErrorContains(t, err, "no <svg> element")
}

// With STRATA_SHOW_EXPORT set, each figure shown is also written as a PNG,
// numbered on from the files already there (each cell is a process).
func TestFiguresShownAreExportedForComparison(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "exports")
	t.Setenv(ExportEnv, dir)
	f, err := viz.Heatmap([][]float64{{1, 2, 3}}, nil, nil, "t")
	require.NoError(t, err)
	for range 2 {
		_, err = figureHTML(f)
		require.NoError(t, err)
	}
	names, err := filepath.Glob(filepath.Join(dir, "*"))
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(dir, "figure-001.png"), filepath.Join(dir, "figure-002.png")}, names)
	raw, err := os.ReadFile(names[1])
	require.NoError(t, err)
	img, err := png.Decode(bytes.NewReader(raw))
	require.NoError(t, err)
	w, h := f.PixelSize()
	require.Equal(t, image.Pt(w, h), img.Bounds().Size())
}

type badFigure struct{}

func (badFigure) Encode(io.Writer, string) error { return nil }

func TestErrorsAndTablesAreEscaped(t *testing.T) {
	require.Contains(t, errorHTML(errors.New("want <b>")), "want &lt;b&gt;</div>")
	h := tableHTML(Table{Header: []string{"a<"}, Rows: [][]string{{"<td>"}}})
	require.Equal(t, "<table><tr><th>a&lt;</th></tr><tr><td>&lt;td&gt;</td></tr></table>", h)
}

// The trace's token strip shows spaces as the token views do.
func TestCaptureTableDotsSpaces(t *testing.T) {
	tr := trace.New()
	tr.Tokens, tr.Pieces = []int32{7, 8}, []string{" (", "<s>"}
	h := captureTable(tr)
	require.Contains(t, h, `>·(</span>`)
	require.Contains(t, h, `>&lt;s&gt;</span>`)
}

// A caption titles a figure Show draws from data, in place of its default
// title; a figure made by the caller keeps its own title, captioned above.
func TestCaptionTitlesFiguresShowDraws(t *testing.T) {
	parts := []Contribution{{Label: "embed", Logit: 1}, {Label: "0_attn_out", Logit: -1}}
	f, ok, err := asFigure(parts, "direct logit attribution to logit(' a') − logit(' b')")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "direct logit attribution to logit(' a') − logit(' b')", f.Title)
	f, _, err = asFigure(parts, "")
	require.NoError(t, err)
	require.Equal(t, "direct logit attribution of each component", f.Title)

	own, err := viz.Bars([]string{"a"}, []float64{1}, "mine", "logit")
	require.NoError(t, err)
	f, _, err = asFigure(own, "captioned")
	require.NoError(t, err)
	require.Equal(t, "mine", f.Title)
	require.Greater(t, f.Height, own.Height, "the caption is written above the figure")
}
