package viz

import (
	"bytes"
	"encoding/xml"
	"html"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/recorder"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/trace"
)

// svgElement is one element of an SVG file with its attributes.
type svgElement struct {
	name  string
	attrs map[string]string
}

func svgElements(t *testing.T, svg string) []svgElement {
	var out []svgElement
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		if s, ok := tok.(xml.StartElement); ok {
			e := svgElement{name: s.Name.Local, attrs: map[string]string{}}
			for _, a := range s.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			out = append(out, e)
		}
	}
}

func number(t *testing.T, s string) float64 {
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "px"), 64)
	require.NoError(t, err, s)
	return v
}

// A browser draws vgsvg's output unlike its PNG (issue 11: heatmaps fitted
// into squares); every raster must fill the rectangle it was drawn in, and
// the SVG must be as many CSS pixels as the PNG has pixels.
func TestSVGDrawsRastersAndTextWhereThePNGDoes(t *testing.T) {
	m := synthModel(t)
	tr := withLens(t, m, prefill(t, m, synthTokens, engine.CaptureAll()))
	cases := append(figureCases(tr), genericCases(tr)...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fig := must(c.make())
			var rec recorder.Canvas
			fig.paint(&rec)
			var rects []vg.Rectangle
			var texts []*recorder.FillString
			for _, a := range rec.Actions {
				switch a := a.(type) {
				case *recorder.DrawImage:
					rects = append(rects, a.Rectangle)
				case *recorder.FillString:
					texts = append(texts, a)
				}
			}

			var b bytes.Buffer
			require.NoError(t, fig.Encode(&b, "svg"))
			els := svgElements(t, b.String())
			require.Equal(t, "svg", els[0].name)
			pw, ph := fig.PixelSize()
			require.Equal(t, strconv.Itoa(pw)+"px", els[0].attrs["width"])
			require.Equal(t, strconv.Itoa(ph)+"px", els[0].attrs["height"])
			require.Equal(t, "preserve", els[0].attrs["space"], "labels keep their spaces")

			var images, textEls []svgElement
			for _, e := range els {
				switch e.name {
				case "image":
					images = append(images, e)
				case "text":
					textEls = append(textEls, e)
				}
			}
			require.Len(t, images, len(rects))
			for i, img := range images {
				require.Equal(t, "none", img.attrs["preserveAspectRatio"], "image %d", i)
				require.InDelta(t, rects[i].Size().X.Points(), number(t, img.attrs["width"]), 1e-6, "image %d width", i)
				require.InDelta(t, rects[i].Size().Y.Points(), number(t, img.attrs["height"]), 1e-6, "image %d height", i)
				require.True(t, strings.HasPrefix(img.attrs["href"], "data:image/png;base64,"))
			}
			require.Len(t, textEls, len(texts))
			for i, e := range textEls {
				if texts[i].String == "" {
					continue
				}
				require.Equal(t, "spacingAndGlyphs", e.attrs["lengthAdjust"], "text %q", texts[i].String)
				require.Greater(t, number(t, e.attrs["textLength"]), 0.0, "text %q", texts[i].String)
			}

			b.Reset()
			require.NoError(t, fig.Encode(&b, "png"))
			cfg, err := png.DecodeConfig(&b)
			require.NoError(t, err)
			require.Equal(t, [2]int{pw, ph}, [2]int{cfg.Width, cfg.Height}, "PNG and SVG sizes")
		})
	}
}

// genericCases draws what nb.Show draws for plain data.
func genericCases(tr *trace.Trace) []figureCase {
	return []figureCase{
		{"Line", func() (*Figure, error) { return Line([]float64{1, 3, 2}, "a line") }, []string{"a line"}},
		{"Heatmap", func() (*Figure, error) { return Heatmap([][]float64{{1, -2, 0}, {0.5, 0, 3}}, nil, nil, "signed") }, []string{"signed", "index 0"}},
		{"HeatmapLabelled", func() (*Figure, error) {
			return Heatmap([][]float64{{1, -2, 0}, {0.5, 0, 3}}, []string{"clean", "corrupt"}, []string{"tok_a", "tok_b", "tok_c"}, "labelled")
		}, []string{"labelled", "corrupt", "tok_b"}},
		{"Tensor1D", func() (*Figure, error) {
			return Tensor(&trace.Tensor{Shape: []int{4}, Data: []float32{1, 2, 3, 4}}, "v")
		}, []string{"v [4]"}},
		{"Tensor3D", func() (*Figure, error) { return Tensor(tr.Tensor("blocks.0.attn.hook_pattern"), "") }, []string{"[0]", "[7]"}},
		{"CapturedPattern", func() (*Figure, error) { return Captured(tr, "blocks.0.attn.hook_pattern") }, []string{"H7", "&lt;|unused_300|&gt;"}},
		{"CapturedQ", func() (*Figure, error) { return Captured(tr, "blocks.1.attn.hook_q") }, []string{"&lt;|unused_300|&gt;"}},
		{"Plot", func() (*Figure, error) { return Plot(newPlot("mine"), 0, 0), nil }, []string{"mine"}},
	}
}

func TestGenericFiguresExport(t *testing.T) {
	m := synthModel(t)
	checkFigures(t, genericCases(prefill(t, m, synthTokens, engine.CaptureAll())))
}

func TestGenericFiguresRefuseWhatTheyCannotDraw(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{second(Line(nil, "x")), "Line: no values"},
		{second(Line([]float64{1, math.NaN()}, "x")), "viz: Line: value 1 of 2 is NaN: a line has no point to draw there"},
		{second(Line([]float64{math.Inf(-1), 1}, "x")), "viz: Line: value 0 of 2 is -Inf"},
		{second(Heatmap([][]float64{{1, 2}, {3}}, nil, nil, "x")), "row 1 has 1 values, row 0 has 2"},
		{second(Heatmap([][]float64{{1, 2}}, []string{"a", "b"}, nil, "x")), "2 row labels for 1 rows"},
		{second(Heatmap([][]float64{{1, 2}}, nil, []string{"a"}, "x")), "1 column labels"},
		{second(Tensor(&trace.Tensor{Shape: []int{1, 1, 1, 2}, Data: []float32{1, 2}}, "x")), "cannot draw a 4-D tensor"},
		{second(Tensor(&trace.Tensor{Shape: []int{3}, Data: []float32{1, 2}}, "x")), "shape [3] wants 3 values, the tensor holds 2"},
		{second(Tensor(nil, "x")), "a nil tensor"},
		{second(Captured(trace.New(), "blocks.0.attn.hook_q")), `capture "blocks.*.attn.hook_q"`},
	} {
		require.ErrorContains(t, c.err, c.want)
	}
}

func TestWideHeatmapsAverageColumns(t *testing.T) {
	row := make([]float64, 3000)
	for i := range row {
		row[i] = float64(i % 3)
	}
	f := must(Heatmap([][]float64{row}, nil, nil, "wide"))
	require.Contains(t, f.Title, "averaged in blocks of 3")
	// The ticks name columns, not blocks: they ran to 999 of 3,000.
	var b bytes.Buffer
	require.NoError(t, f.Encode(&b, "svg"))
	last := 0.0
	for _, m := range regexp.MustCompile(`>([0-9]+)</text>`).FindAllStringSubmatch(b.String(), -1) {
		last = max(last, number(t, m[1]))
	}
	require.Greater(t, last, 2500.0, "the last tick")
	require.Contains(t, b.String(), ">index 1 (a block&#39;s first")
	require.Equal(t, [][]float64{{1, 2}}, meanPool([][]float64{{0, 2, 3, 1}}, 2))
}

// Long prompts make thinner cells and fewer labels, not figures wider than
// a notebook's column (issue 11: a 101-token logit lens was 2,336 px).
func TestLongPromptsKeepFiguresNarrow(t *testing.T) {
	m := synthModel(t)
	tokens := make([]int32, 150) // 75 twice, for induction scores
	for i := range tokens {
		tokens[i] = int32(1 + i%75*6)
	}
	tr := withLens(t, m, prefill(t, m, tokens, engine.CaptureAll()))
	for _, c := range append(figureCases(tr), genericCases(tr)...) {
		fig := must(c.make())
		require.LessOrEqual(t, float64(fig.Width), maxWidth+1e-6, c.name)
	}
	// The lens labels every other position or fewer.
	var b bytes.Buffer
	require.NoError(t, must(LogitLens(tr)).Encode(&b, "svg"))
	labels := 0
	for _, p := range tr.Pieces {
		labels += strings.Count(b.String(), ">"+strings.ReplaceAll(label(p), "<", "&lt;")+"</text>")
	}
	require.Less(t, labels, 100)
}

func contrastRatio(a, b color.Color) float64 {
	lum := func(c color.Color) float64 {
		r, g, b, _ := c.RGBA()
		return 0.2126*linear(r) + 0.7152*linear(g) + 0.0722*linear(b)
	}
	la, lb := lum(a), lum(b)
	return (max(la, lb) + 0.05) / (min(la, lb) + 0.05)
}

// Annotations are black or white, whichever is readable on the cell: at
// least WCAG's 4.5:1 on every colour of both scales.
func TestAnnotationsContrastWithEveryCell(t *testing.T) {
	for _, sc := range []scale{sequential(0, 1), diverging(1)} {
		for i := 0; i <= 100; i++ {
			c := sc.color(sc.lo + (sc.hi-sc.lo)*float64(i)/100)
			require.GreaterOrEqual(t, contrastRatio(contrast(c), c), 4.5, "cell colour %v", c)
		}
	}
	require.Equal(t, color.White, contrast(sequential(0, 1).color(1)))
	require.Equal(t, color.Black, contrast(sequential(0, 1).color(0)))
}

func TestColumnLabelsStandUprightOnlyWhenLevelOnesCollide(t *testing.T) {
	require.False(t, upright([]string{"<|endoftext|>", " x", " :=", " a"}, 44), "one long label between short ones fits")
	require.True(t, upright([]string{"<|endoftext|>", "func", " add"}, 20))
	require.False(t, upright([]string{"10", "11", "12"}, 2), "numbers stay level, thinned")
	require.True(t, collide([]string{"10", "11", "12"}, 2))
}

// A browser draws every character of a label, the leading space of a
// SentencePiece token too, inline in HTML as nb.Show puts figures: it
// ignored xml:space there, dropped the space of " s" and stretched the "s"
// over the width measured for " s".
func TestSVGLabelsKeepTheirSpacesInABrowser(t *testing.T) {
	browser, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (Debian package chromium); the check needs it")
	}
	fig := must(PatchingHeatmap([][]float64{{1, -1, 0.5}}, []string{"L0"}, []string{" s", " (", "x y"}, "labels with spaces"))
	var b bytes.Buffer
	require.NoError(t, fig.Encode(&b, "svg"))
	svg := b.String()
	svg = svg[strings.Index(svg, "<svg "):]
	check := `<pre id="out"></pre><script>
const bad=[], spaced=[];
for (const e of document.querySelectorAll('text')) {
  if (e.textContent.startsWith(' ')) spaced.push(e.textContent);
  if (e.getNumberOfChars() !== e.textContent.length) bad.push(JSON.stringify(e.textContent) + ' draws ' + e.getNumberOfChars());
}
document.getElementById('out').textContent = 'spaced=' + spaced.length + ' bad=' + JSON.stringify(bad);
</script>`
	page := filepath.Join(t.TempDir(), "fig.html")
	require.NoError(t, os.WriteFile(page, []byte("<!DOCTYPE html><html><body><div>"+svg+"</div>"+check+"</body></html>"), 0o644))
	dom, err := runChromium(t, browser, page, "")
	require.NoError(t, err, "chromium")
	out := regexp.MustCompile(`<pre id="out">([^<]*)</pre>`).FindStringSubmatch(dom)
	require.NotNil(t, out, "the check ran")
	// The labels' leading spaces are middle dots now, as in the HTML views;
	// the other texts keep their spaces whole.
	require.Equal(t, "spaced=0 bad=[]", html.UnescapeString(out[1]))
	require.Contains(t, svg, ">·s</text>")
	require.Contains(t, svg, ">·(</text>")
}

// The logit lens names its prediction in every cell, at minText and
// within the cell, up to 64 tokens and beyond: a short prompt runs across,
// a long one turns (positions down, layers across) rather than cutting its
// names to "Co…" at 7 pixels, as notebook 03 did at 30 tokens. Only past
// what fits down the page do the cells go unnamed, and the title says so.
func TestLogitLensNamesTokensInEveryCell(t *testing.T) {
	m := synthModel(t)
	for _, n := range []int{12, 19, 30, 35, 36, 64, 150} {
		tokens := make([]int32, n)
		for i := range tokens {
			tokens[i] = int32(1 + 37*i%1500)
		}
		tr := withLens(t, m, prefill(t, m, tokens, engine.CaptureOf("blocks.*.hook_resid_post")))
		fig := must(LogitLens(tr))
		var rec recorder.Canvas
		fig.paint(&rec)
		says := false
		type cell struct {
			centre, width vg.Length
			text          string
		}
		rows := map[vg.Length][]cell{}
		for _, a := range rec.Actions {
			s, ok := a.(*recorder.FillString)
			if !ok {
				continue
			}
			if strings.Contains(s.String, "too many positions to name the tokens") {
				says = true
			}
			require.GreaterOrEqual(t, float64(s.Font.Size), float64(minText), "%d tokens: %q", n, s.String)
			if s.Font.Size > minText {
				continue // titles and ticks
			}
			width := text.Style{Font: s.Font, Handler: plot.DefaultTextHandler}.Width(s.String)
			rows[s.Point.Y] = append(rows[s.Point.Y], cell{s.Point.X + width/2, width, s.String})
			if shown, cut := strings.CutSuffix(s.String, "…"); cut {
				require.GreaterOrEqual(t, utf8.RuneCountInString(strings.TrimSpace(shown)), 2, "%d tokens: %q shows two letters", n, s.String)
			}
		}
		cells := 0
		for _, row := range rows {
			slices.SortFunc(row, func(a, b cell) int { return int(a.centre - b.centre) })
			for i := 1; i < len(row); i++ {
				pitch := row[i].centre - row[i-1].centre
				require.LessOrEqual(t, float64(max(row[i].width, row[i-1].width)), float64(pitch), "%d tokens: %q and %q fit their cells", n, row[i-1].text, row[i].text)
			}
			cells += len(row)
		}
		named := n <= 64
		require.Equal(t, !named, says, "%d tokens: the title says whether the cells name their tokens", n)
		if !named {
			require.Zero(t, cells, "%d tokens: cells too small to name", n)
			continue
		}
		require.Equal(t, m.Layers*n, cells, "%d tokens: a name in every cell", n)
		if n == 64 {
			require.Greater(t, fig.Height, fig.Width, "64 tokens run down the page")
		}
	}
}

// A heatmap's cells print numbers whole or not at all: cut to fit,
// -0.0012 read "-0.0…" and 1234 "1.2e…".
func TestHeatmapNumbersAreNeverCut(t *testing.T) {
	for _, heads := range []int{4, 12, 20} {
		z := [][]float64{make([]float64, heads), make([]float64, heads)}
		for i := range z[0] {
			z[0][i] = []float64{-0.0012, 3.4e-05, 1234, -120, 0.5}[i%5]
			z[1][i] = -z[0][i]
		}
		fig := must(HeadHeatmap(z, "values"))
		var rec recorder.Canvas
		fig.paint(&rec)
		numbers := 0
		for _, a := range rec.Actions {
			if s, ok := a.(*recorder.FillString); ok && s.Font.Size == minText {
				_, err := strconv.ParseFloat(s.String, 64)
				require.NoError(t, err, "%d heads: %q is a whole number", heads, s.String)
				numbers++
			}
		}
		require.Contains(t, []int{0, 2 * heads}, numbers, "%d heads: every cell or none", heads)
	}
	// A normalised patching result: one noisy cell of -0.00029 and a -0
	// took every number away. The largest, 1, has two significant digits
	// at one decimal, which every cell shares; what rounds to 0 is "0".
	fig := must(HeadHeatmap([][]float64{{1, -0.00029, 0.5, math.Copysign(0, -1)}, {0.25, 0, -0.75, 0.1}}, "normalised"))
	var rec recorder.Canvas
	fig.paint(&rec)
	var got []string
	for _, a := range rec.Actions {
		if s, ok := a.(*recorder.FillString); ok && s.Font.Size == minText {
			got = append(got, s.String)
		}
	}
	require.ElementsMatch(t, []string{"1.0", "0", "0.5", "0", "0.2", "0", "-0.8", "0.1"}, got)
}

// A result with nothing below 0 runs white to red from 0; one with negative
// values is centred on 0. Either way 0 is the palest colour.
func TestResultScalesMakeZeroPale(t *testing.T) {
	pos := resultScale([][]float64{{0.05, 0.2}, {0.1, math.NaN()}})
	require.Equal(t, [2]float64{0, 0.2}, [2]float64{pos.lo, pos.hi})
	signed := resultScale([][]float64{{-1, 0.5}})
	require.Equal(t, [2]float64{-1, 1}, [2]float64{signed.lo, signed.hi})
	zeros := resultScale([][]float64{{0, 0}}) // a sweep where nothing changed
	require.Equal(t, zeros.color(0), diverging(1).color(0))
	for _, sc := range []scale{pos, signed} {
		require.Equal(t, color.Black, contrast(sc.color(0)), "0 is pale")
		require.Equal(t, color.White, contrast(sc.color(sc.hi)), "the largest value is dark")
	}
}

// A result with a row per head names its axes as one per layer does.
func TestHeadRowsNameTheirAxes(t *testing.T) {
	rows := LayerHeadLabels(2, 3)
	require.Equal(t, []string{"L0H0", "L0H1", "L0H2", "L1H0", "L1H1", "L1H2"}, rows)
	z := make([][]float64, len(rows))
	for i := range z {
		z[i] = []float64{0.1, float64(i)}
	}
	var b bytes.Buffer
	require.NoError(t, must(PatchingHeatmap(z, rows, []string{"a", "b"}, "t")).Encode(&b, "svg"))
	require.Contains(t, b.String(), ">layer and head</text>")
	require.Contains(t, b.String(), ">position</text>")
	b.Reset()
	require.NoError(t, must(PatchingHeatmap(z, []string{"a", "b", "c", "d", "e", "f"}, []string{"a", "b"}, "t")).Encode(&b, "svg"))
	require.NotContains(t, b.String(), ">position</text>", "rows of its own: no names guessed")
}

// Layers stack upward in every figure with an axis of layers: the
// attention grid ran down (L0 at the top) beside the head scores' heatmap
// running up, so a row read across both named two layers.
func TestFiguresStackLayersTheSameWay(t *testing.T) {
	tr := prefill(t, synthModel(t), synthTokens, engine.CaptureAll())
	label := regexp.MustCompile(`<text[^>]* y="([-0-9.]+)"[^>]*>(L[01])</text>`)
	for name, f := range map[string]func() (*Figure, error){
		"AttentionGrid":   func() (*Figure, error) { return AttentionGrid(tr) },
		"PrevTokenScores": func() (*Figure, error) { return PrevTokenScores(tr) },
		"ResidNorms":      func() (*Figure, error) { return ResidNorms(tr) },
	} {
		var b bytes.Buffer
		require.NoError(t, must(f()).Encode(&b, "svg"))
		y := map[string]float64{}
		for _, m := range label.FindAllStringSubmatch(b.String(), -1) {
			y[m[2]] = -number(t, m[1]) // vgsvg writes text flipped: scale(1, -1)
		}
		require.Len(t, y, 2, "%s labels L0 and L1", name)
		require.Less(t, y["L0"], y["L1"], "%s: layer 0 below layer 1", name)
	}
}
