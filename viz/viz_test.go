package viz

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/recorder"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/trace"
)

// synthTokens repeat six tokens after BOS, so that every figure, induction
// scores included, has something to draw.
var synthTokens = []int32{1, 77, 300, 12, 450, 99, 5, 77, 300, 12, 450, 99, 5}

const storyPrompt = "Once upon a time, there was a little girl named Lily."

type figureCase struct {
	name string
	make func() (*Figure, error)
	// texts must appear as whole SVG text elements (HTML-escaped).
	texts []string
}

// figureCases draws every figure of tr; tokens are labels that figures
// with a position axis must show.
func figureCases(tr *trace.Trace, tokens ...string) []figureCase {
	return []figureCase{
		{"AttentionHead", func() (*Figure, error) { return AttentionHead(tr, 1, 2) }, append([]string{"query", "key"}, tokens...)},
		{"AttentionGrid", func() (*Figure, error) { return AttentionGrid(tr) }, []string{"L0", "L1", "H0", "H7"}},
		{"PrevTokenScores", func() (*Figure, error) { return PrevTokenScores(tr) }, []string{"L0", "H7"}},
		{"InductionScores", func() (*Figure, error) { return InductionScores(tr, 0) }, []string{"L1", "H0", fmt.Sprintf("Induction score by head (period %d)", trace.RepeatPeriod(tr.Tokens))}},
		{"ResidNorms", func() (*Figure, error) { return ResidNorms(tr) }, append([]string{"embed", "L1"}, tokens...)},
		{"AttnMLPNorms", func() (*Figure, error) { return AttnMLPNorms(tr) }, []string{"attention out", "MLP out"}},
		{"LogitLens", func() (*Figure, error) { return LogitLens(tr) }, append([]string{"L0"}, tokens...)},
		{"KVCache", func() (*Figure, error) { return KVCache(tr, 1, 3) }, append([]string{"KV cache, layer 1 KV head 3 (K and V each on its own colour scale)", "K (after RoPE)", "V", "K norm"}, tokens...)},
		{"PCA", func() (*Figure, error) { return PCA(tr) }, []string{"embed", "L1"}},
		{"PatchingHeatmap", func() (*Figure, error) {
			return PatchingHeatmap([][]float64{{0.5, -1, 0}, {2, 0.25, -0.5}}, []string{"L0", "L1"}, []string{"a", "<b>", "c"}, "Patched logit difference")
		}, []string{"L0", "L1", "&lt;b&gt;", "Patched logit difference"}},
	}
}

func TestFiguresExportToPNGSVGAndPDF(t *testing.T) {
	m := synthModel(t)
	tr := withLens(t, m, prefill(t, m, synthTokens, engine.CaptureAll()))
	// The generated vocabulary's pieces for tokens 300 and 77; the first
	// checks that labels are escaped in SVG.
	checkFigures(t, figureCases(tr, "&lt;|unused_300|&gt;", "M"))
}

func TestFiguresOfTrainedModelShowItsTokens(t *testing.T) {
	// A leading space shows as a middle dot, as in the HTML views: a bare
	// space drew " (" as "(".
	for _, c := range figureCases(storiesTrace(t, storyPrompt+" "+storyPrompt), "&lt;s&gt;", "·Once", "·upon", "·Lily") {
		fig, err := c.make()
		require.NoError(t, err, c.name)
		var b bytes.Buffer
		require.NoError(t, fig.Encode(&b, "svg"), c.name)
		for _, s := range c.texts {
			require.Contains(t, b.String(), ">"+s+"</text>", "%s: SVG text %q", c.name, s)
		}
	}
}

func checkFigures(t *testing.T, cases []figureCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fig, err := c.make()
			require.NoError(t, err)
			require.NotEmpty(t, fig.Title)

			var b bytes.Buffer
			require.NoError(t, fig.Encode(&b, "png"))
			img, err := png.Decode(&b)
			require.NoError(t, err)
			// vgimg sizes the image as round(points / 72 * dpi).
			wantW, wantH := int(float64(fig.Width)*PNGDPI/72+0.5), int(float64(fig.Height)*PNGDPI/72+0.5)
			require.Equal(t, image.Rect(0, 0, wantW, wantH), img.Bounds())
			require.Greater(t, distinctColors(img), 20, "a drawn figure has many colours")

			b.Reset()
			require.NoError(t, fig.Encode(&b, "svg"))
			svg := b.String()
			requireWellFormedXML(t, svg)
			for _, s := range c.texts {
				require.Contains(t, svg, ">"+s+"</text>", "SVG text %q", s)
			}

			b.Reset()
			require.NoError(t, fig.Encode(&b, "pdf"))
			require.True(t, bytes.HasPrefix(b.Bytes(), []byte("%PDF-")), "PDF header")
			require.Contains(t, b.String(), "%%EOF")
		})
	}
}

func distinctColors(img image.Image) int {
	seen := map[color.RGBA]bool{}
	r := img.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			seen[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)] = true
		}
	}
	return len(seen)
}

func requireWellFormedXML(t *testing.T, s string) {
	d := xml.NewDecoder(strings.NewReader(s))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		require.NoError(t, err)
	}
}

// handTrace is a one-layer, one-head trace of three tokens "a b c" whose
// pattern is given.
func handTrace(pattern []float32) *trace.Trace {
	tr := trace.New()
	tr.Model = trace.Model{Name: "hand", Layers: 1, DModel: 2, Heads: 1, KVHeads: 1, HeadDim: 2, Vocab: 8}
	tr.Tokens, tr.Pieces = []int32{1, 2, 3}, []string{"a", "b", "c"}
	tr.Put("blocks.0.attn.hook_pattern", &trace.Tensor{Shape: []int{1, 3, 3}, Data: pattern})
	return tr
}

// darkBox is the bounding box of the pixels near the colour of the top of
// the sequential scale, left of the colour bar.
func darkBox(t *testing.T, f *Figure) image.Rectangle {
	var b bytes.Buffer
	require.NoError(t, f.Encode(&b, "png"))
	img, err := png.Decode(&b)
	require.NoError(t, err)
	dark := color.RGBAModel.Convert(sequential(0, 1).color(1)).(color.RGBA)
	box := image.Rectangle{}
	limit := img.Bounds().Dx() - int(barWidth*PNGDPI/72)
	for y := 0; y < img.Bounds().Dy(); y++ {
		for x := 0; x < limit; x++ {
			c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
			if absDiff(c.R, dark.R)+absDiff(c.G, dark.G)+absDiff(c.B, dark.B) < 30 {
				box = box.Union(image.Rect(x, y, x+1, y+1))
			}
		}
	}
	require.False(t, box.Empty(), "no dark cell found")
	return box
}

func absDiff(a, b uint8) int {
	if a > b {
		return int(a - b)
	}
	return int(b - a)
}

func TestAttentionHeadPutsQueriesDownAndKeysAcross(t *testing.T) {
	firstKey := []float32{1, 0, 0, 1, 0, 0, 1, 0, 0} // every query on key 0
	column := darkBox(t, must(AttentionHead(handTrace(firstKey), 0, 0)))
	topLeft := darkBox(t, must(AttentionHead(handTrace([]float32{1, 0, 0, 0, 0, 0, 0, 0, 0}), 0, 0)))
	bottomRight := darkBox(t, must(AttentionHead(handTrace([]float32{0, 0, 0, 0, 0, 0, 0, 0, 1}), 0, 0)))

	require.Greater(t, column.Dy(), 2*column.Dx(), "three stacked cells make a tall column")
	require.InDelta(t, column.Min.X, topLeft.Min.X, 2, "key 0 is the first column")
	require.InDelta(t, column.Min.Y, topLeft.Min.Y, 2, "query 0 is the top row")
	require.Less(t, topLeft.Max.Y, column.Min.Y+column.Dy()/2)
	require.InDelta(t, column.Max.Y, bottomRight.Max.Y, 2, "query 2 is the bottom row")
	require.Greater(t, bottomRight.Min.X, column.Max.X+column.Dx(), "key 2 is two columns right")
}

func TestLayerFiguresStackLayerZeroAtTheBottom(t *testing.T) {
	tr := trace.New()
	tr.Model = trace.Model{Name: "hand", Layers: 3, DModel: 2, Heads: 1, KVHeads: 1, HeadDim: 2, Vocab: 8}
	tr.Tokens, tr.Pieces = []int32{1, 2}, []string{"a", "b"}
	// Norm 5 in layer 0 (the darkest), 0 in layers 1 and 2 (white).
	tr.Put("blocks.0.hook_resid_post", &trace.Tensor{Shape: []int{2, 2}, Data: []float32{3, 4, 4, 3}})
	tr.Put("blocks.1.hook_resid_post", &trace.Tensor{Shape: []int{2, 2}, Data: make([]float32, 4)})
	tr.Put("blocks.2.hook_resid_post", &trace.Tensor{Shape: []int{2, 2}, Data: make([]float32, 4)})
	fig := must(ResidNorms(tr))
	box := darkBox(t, fig)
	height := int(float64(fig.Height) * PNGDPI / 72)
	require.Greater(t, box.Min.Y, height/3, "layer 0's row is not at the top")
	require.Less(t, box.Dy(), height/3, "one row of three")
}

// A first position whose norm dwarfs the rest (an attention sink) would
// leave every other cell pale: the colours span the others, position 0
// takes the deepest, and the title gives its norm.
func TestResidNormsKeepTheirScaleBesideAnOutgrownFirstPosition(t *testing.T) {
	const T = 24 // wide enough that the title does not widen the figure
	tr := trace.New()
	tr.Model = trace.Model{Name: "hand", Layers: 1, DModel: 2, Heads: 1, KVHeads: 1, HeadDim: 2, Vocab: 8}
	for p := range T {
		tr.Tokens, tr.Pieces = append(tr.Tokens, int32(p)), append(tr.Pieces, fmt.Sprint(p))
	}
	resid := func(first float32) *trace.Tensor {
		x := &trace.Tensor{Shape: []int{T, 2}, Data: make([]float32, 2*T)}
		for p := range T {
			x.Data[2*p] = 1
		}
		x.Data[0], x.Data[1] = 0.6*first, 0.8*first
		x.Data[2], x.Data[3] = 3, 4 // norm 5 at position 1
		return x
	}
	tr.Put("blocks.0.hook_resid_post", resid(100))
	fig := must(ResidNorms(tr))
	require.Contains(t, fig.Title, "position 0 reaches 100, past the scale")
	two := darkBox(t, fig).Dx()

	// Without such a first position, one scale for all: only position 0
	// is the deepest colour.
	tr.Put("blocks.0.hook_resid_post", resid(10))
	fig = must(ResidNorms(tr))
	require.Equal(t, "Residual stream L2 norm", fig.Title)
	one := darkBox(t, fig).Dx()
	require.InDelta(t, 2, float64(two)/float64(one), 0.2, "positions 0 and 1 both take the deepest colour beside the outgrown one")
}

// tokTrace is a trace of t tokens "tok0".. of a model of the given
// layers and width, with nothing captured.
func tokTrace(t, d, layers int) *trace.Trace {
	tr := trace.New()
	tr.Model = trace.Model{Name: "hand", Layers: layers, DModel: d, Heads: 1, KVHeads: 1, HeadDim: d, Vocab: 8}
	for p := range t {
		tr.Tokens, tr.Pieces = append(tr.Tokens, int32(p)), append(tr.Pieces, fmt.Sprintf("tok%d", p))
	}
	return tr
}

// PCA leaves out a first position that outgrows the rest, saying so, and
// labels every other position; without one it draws them all.
func TestPCALeavesOutAnOutgrownFirstPosition(t *testing.T) {
	const T, d = 6, 3
	tr := tokTrace(T, d, 2)
	put := func(first float32) {
		for l := range 2 {
			x := &trace.Tensor{Shape: []int{T, d}, Data: make([]float32, T*d)}
			for i := range x.Data {
				x.Data[i] = float32((i*7+l*3)%5) - 2
			}
			for j := range d {
				x.Data[j] *= first
			}
			tr.Put(fmt.Sprintf("blocks.%d.hook_resid_post", l), x)
		}
	}
	labels := func(fig *Figure) (title string, pieces []string) {
		var rec recorder.Canvas
		fig.paint(&rec)
		for _, a := range rec.Actions {
			if s, ok := a.(*recorder.FillString); ok && strings.HasPrefix(s.String, "tok") {
				pieces = append(pieces, s.String)
			}
		}
		return fig.Title, pieces
	}
	put(100)
	title, pieces := labels(must(PCA(tr)))
	require.Contains(t, title, "(position 0 left out: norm to ")
	want := []string{"tok1", "tok2", "tok3", "tok4", "tok5"}
	require.Equal(t, slices.Concat(want, want), pieces, "two layers, two panels")
	put(1)
	title, pieces = labels(must(PCA(tr)))
	require.Equal(t, "Each layer's states on its first two principal components", title)
	// Position 5's states are position 0's (the data repeat every 5
	// elements, 15 = 5 positions): its label would cover tok0's, in either
	// panel. (Layer 1 holds layer 0's points in another order, and its
	// projection may be mirrored, leaving out other labels that touch.)
	require.Equal(t, []string{"tok0", "tok1", "tok2", "tok3", "tok4"}, pieces[:5], "layer 0's panel")
	require.NotContains(t, pieces, "tok5")
}

// On the default model with notebook 03's prompt, layer 2's states of
// positions 0 and 1 have norms 168 and 112 where the others are about 39:
// position 0 is not twice position 1, so one rule over the whole figure
// kept both, and they took the first component (x from -140 to 20, the
// rest between -20 and 20). Against each layer's median both go.
func TestPCALeavesOutEveryStateFarPastItsLayer(t *testing.T) {
	const T, d, layers = 8, 3, 3
	tr := tokTrace(T, d, layers)
	norms := make([][]float64, layers)
	for l := range layers {
		x := &trace.Tensor{Shape: []int{T, d}, Data: make([]float32, T*d)}
		for p := range T {
			a := float64(p+l) * 0.7
			v := []float64{math.Cos(a), math.Sin(a), 0.3 * float64(l-1)}
			n := 39.0
			if l == 1 && p < 2 {
				n = []float64{168, 112}[p]
			}
			for j := range d {
				x.Data[p*d+j] = float32(n * v[j] / floats.Norm(v, 2))
			}
			norms[l] = append(norms[l], n)
		}
		tr.Put(fmt.Sprintf("blocks.%d.hook_resid_post", l), x)
	}
	_, ok := outgrownFirst(tr, norms)
	require.False(t, ok, "168 is not twice 112: the first position alone does not outgrow the rest")
	fig := must(PCA(tr))
	require.Contains(t, fig.Title, "(positions 0 and 1 left out: norms to 168, over 2× their layer's median)")
	var rec recorder.Canvas
	fig.paint(&rec)
	var drawn []string
	for _, a := range rec.Actions {
		if s, ok := a.(*recorder.FillString); ok && strings.HasPrefix(s.String, "tok") {
			drawn = append(drawn, s.String)
		}
	}
	kept := []string{"tok2", "tok3", "tok4", "tok5", "tok6", "tok7"}
	require.Equal(t, slices.Concat(kept, kept, kept), drawn, "the same positions in each layer's panel")
}

// Consecutive layers' points differ in hue as well as lightness: on the
// light-to-dark blues, L1 and L2 of four stages were 26 apart in CIELAB
// (ΔE76), every step under 30; along viridis they are 53, none under 37.
func TestPCALayerColoursStandApart(t *testing.T) {
	for _, n := range []int{4, 5} {
		for i := 1; i < n; i++ {
			require.Greater(t, deltaE(stageColor(i-1, n), stageColor(i, n)), 90/float64(n-1), "%d stages: %d and %d", n, i-1, i)
		}
	}
	require.Greater(t, deltaE(stageColor(1, 4), stageColor(2, 4)), 40.0, "L1 and L2 of four")
}

// deltaE is the CIELAB distance (ΔE76) of two opaque sRGB colours.
func deltaE(a, b color.Color) float64 {
	lab := func(c color.Color) [3]float64 {
		r, g, b, _ := c.RGBA()
		R, G, B := linear(r), linear(g), linear(b)
		x := (0.4124*R + 0.3576*G + 0.1805*B) / 0.95047
		y := 0.2126*R + 0.7152*G + 0.0722*B
		z := (0.0193*R + 0.1192*G + 0.9505*B) / 1.08883
		f := func(t float64) float64 {
			if t > 216.0/24389 {
				return math.Cbrt(t)
			}
			return (24389.0/27*t + 16) / 116
		}
		return [3]float64{116*f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))}
	}
	p, q := lab(a), lab(b)
	return math.Sqrt((p[0]-q[0])*(p[0]-q[0]) + (p[1]-q[1])*(p[1]-q[1]) + (p[2]-q[2])*(p[2]-q[2]))
}

func must(f *Figure, err error) *Figure {
	if err != nil {
		panic(err)
	}
	return f
}

func TestMissingCapturesSayHowToCaptureThem(t *testing.T) {
	m := synthModel(t)
	tr := prefill(t, m, synthTokens, engine.CaptureOf("blocks.*.hook_resid_post"))
	for _, c := range []struct {
		make func() (*Figure, error)
		want string
	}{
		{func() (*Figure, error) { return AttentionHead(tr, 0, 0) }, `AttentionHead needs blocks.0.attn.hook_pattern, which this trace lacks: capture "blocks.*.attn.hook_pattern"`},
		{func() (*Figure, error) { return AttentionGrid(tr) }, `capture "blocks.*.attn.hook_pattern"`},
		{func() (*Figure, error) { return PrevTokenScores(tr) }, `capture "blocks.*.attn.hook_pattern"`},
		{func() (*Figure, error) { return InductionScores(tr, 6) }, `capture "blocks.*.attn.hook_pattern"`},
		{func() (*Figure, error) { return AttnMLPNorms(tr) }, `capture "blocks.*.hook_attn_out" and "blocks.*.hook_mlp_out"`},
		{func() (*Figure, error) { return KVCache(tr, 1, 0) }, `KVCache needs blocks.1.attn.cache_k, which this trace lacks: capture "blocks.*.attn.cache_k"`},
		{func() (*Figure, error) { return LogitLens(tr) }, "LogitLens needs the logit lens"},
	} {
		_, err := c.make()
		require.ErrorContains(t, err, c.want)
	}
	// What was captured suffices for these.
	_, err := ResidNorms(tr)
	require.NoError(t, err)
	_, err = PCA(tr)
	require.NoError(t, err)

	empty := prefill(t, m, synthTokens, engine.CaptureOf("hook_embed"))
	_, err = ResidNorms(empty)
	require.ErrorContains(t, err, `capture "blocks.*.hook_resid_post"`)
	_, err = PCA(empty)
	require.ErrorContains(t, err, `capture "blocks.*.hook_resid_post"`)
}

func TestBadArgumentsAreNamed(t *testing.T) {
	tr := prefill(t, synthModel(t), synthTokens, engine.CaptureAll())
	for _, c := range []struct {
		err  error
		want string
	}{
		{second(AttentionHead(tr, 4, 0)), "AttentionHead: layer 4 is out of range: the model has 4 layers (0-3)"},
		{second(AttentionHead(tr, 0, 8)), "AttentionHead: head 8 is out of range: the model has 8 heads (0-7)"},
		{second(KVCache(tr, -1, 0)), "KVCache: layer -1 is out of range"},
		{second(KVCache(tr, 0, 4)), "KVCache: KV head 4 is out of range: the model has 4 KV heads (0-3)"},
		{second(InductionScores(tr, 5)), "InductionScores: the prompt does not end in two copies of a sequence of 5 tokens"},
		{second(InductionScores(tr, 7)), "InductionScores: layer 0: trace: induction period 7 needs two copies (14 positions); the pattern covers 13"},
		{second(PatchingHeatmap(nil, nil, nil, "x")), "PatchingHeatmap: the result is empty"},
		{second(PatchingHeatmap([][]float64{{1, 2}, {3}}, []string{"a", "b"}, []string{"x", "y"}, "x")), "row 1 has 1 values, row 0 has 2"},
		{second(PatchingHeatmap([][]float64{{1, 2}}, []string{"a"}, []string{"x"}, "x")), "1 row and 1 column labels for a 1×2 result"},
	} {
		require.ErrorContains(t, c.err, c.want)
	}

	plain := trace.New()
	plain.Tokens = []int32{1, 2, 3, 4}
	_, err := InductionScores(plain, 0)
	require.ErrorContains(t, err, "InductionScores: the prompt does not end in two copies of a sequence (nb.RepeatedRandom makes one)")
	plain.Pos0 = 4
	_, err = InductionScores(plain, 0)
	require.ErrorContains(t, err, "InductionScores: this prefill's tokens do not end in two copies of a sequence; it continues an earlier one, so give the period")

	tr.Lens = &trace.Lens{Prob: [][]float32{{0.5}}, Piece: [][]string{{"a"}}}
	_, err = LogitLens(tr)
	require.ErrorContains(t, err, "logit lens layer 0 has 1 probabilities and 1 pieces, want 13 (one per token)")

	tr.Put("blocks.1.attn.hook_pattern", &trace.Tensor{Shape: []int{8, 13, 12}, Data: make([]float32, 8*13*12)})
	_, err = AttentionGrid(tr)
	require.ErrorContains(t, err, "AttentionGrid: blocks.1.attn.hook_pattern has shape [8 13 12], want [8 13 13]")

	tr.Tokens = nil
	_, err = ResidNorms(tr)
	require.ErrorContains(t, err, "ResidNorms: the trace has no tokens")
}

func second(_ *Figure, err error) error { return err }

func TestSaveChoosesTheFormatByExtension(t *testing.T) {
	fig := must(PatchingHeatmap([][]float64{{1, -1}}, []string{"L0"}, []string{"a", "b"}, "t"))
	dir := t.TempDir()
	for ext, magic := range map[string]string{"png": "\x89PNG", "svg": "<?xml", "PDF": "%PDF-"} {
		path := filepath.Join(dir, "fig."+ext)
		require.NoError(t, fig.Save(path))
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(string(b), magic), "%s starts with %q", path, magic)
	}
	require.ErrorContains(t, fig.Save(filepath.Join(dir, "fig.gif")), "want a name ending in .png, .svg, .pdf")
	require.ErrorContains(t, fig.Save(filepath.Join(dir, "fig")), "want a name ending in")
	require.ErrorContains(t, fig.Encode(io.Discard, "jpeg"), `format "jpeg": want one of png, svg, pdf`)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 3, "no temporary files are left behind")
}

func TestLabelsShowWhitespaceAndStayShort(t *testing.T) {
	require.Equal(t, `\n`, label("\n"))
	require.Equal(t, `a\tb`, label("a\tb"))
	require.Equal(t, "··", label("  "))
	require.Equal(t, "·x", label(" x"), "a leading space shows, as the HTML views show it")
	require.Equal(t, "·(", label(" ("))
	require.Equal(t, "··x", label("  x"))
	require.Equal(t, "x y", label("x y"), "a caller's label keeps the spaces between its words")
	require.Equal(t, "·i", cellText(" i", 7, 40), "the logit lens's cells show it too")
	require.Equal(t, "ab…", cellText(" abcdefgh", minText, measured(minText).Width("ab…")), "a cut name drops the dot before its letters")
	require.Equal(t, `\x00`, label("\x00"))
	require.Equal(t, `\r`, label("\r"))
	require.Equal(t, `a\tb`, label(`a\tb`), "a tokenizer's piece, escaped already, is not escaped again")
	require.Equal(t, `\xC3`, label("é"[:1]), "a byte of a split character")
	require.Equal(t, `\xE2\x80`, label("…"[:2]))
	require.Equal(t, "é…", label("é…"))
	require.Equal(t, "abcdefghijklm…", label("abcdefghijklmnopqrstuvwxyz"))
	require.Equal(t, []string{"#0", "#1", "x", "y"}, positionLabels([]string{"x", "y"}, 2, 0, 4), "positions before this prefill are numbered")
}

func TestMaxPoolKeepsEachBlocksLargest(t *testing.T) {
	z := [][]float64{
		{1, 0, 0, 0, 0},
		{0, 0, 0, 0.5, 0},
		{0, 0.25, 0, 0, 0},
		{0, 0, 0, 0, 0},
		{0, 0, 0, 0, 0.75},
	}
	// Blocks of 3 (5 cells into at most 2): rows 0-2 and 3-4 by columns
	// 0-2 and 3-4.
	require.Equal(t, [][]float64{{1, 0.5}, {0, 0.75}}, maxPool(z, 2))
	require.Equal(t, z, maxPool(z, 5), "small enough already")
}

// The grid's title counts in words: one captured layer is "1 layer".
func TestAttentionGridTitleCounts(t *testing.T) {
	m := synthModel(t)
	fig, err := AttentionGrid(prefill(t, m, synthTokens, engine.CaptureOf("blocks.0.attn.hook_pattern")))
	require.NoError(t, err)
	require.Equal(t, "Attention patterns: 1 layer × 8 heads (rows: queries, columns: keys)", fig.Title)
	fig, err = AttentionGrid(prefill(t, m, synthTokens, engine.CaptureAll()))
	require.NoError(t, err)
	require.Equal(t, "Attention patterns: 4 layers × 8 heads (rows: queries, columns: keys)", fig.Title)
}

// A figure keeps its own copy of what it draws: the trace hands nothing
// out, so Close gives its memory back (to the next prefill, which writes
// over it), and the figure still draws what it drew before.
func TestFiguresHandNothingOut(t *testing.T) {
	tr := trace.New()
	tr.Model = trace.Model{Name: "m", Arch: "llama", Layers: 1, DModel: 4, Heads: 2, KVHeads: 2, HeadDim: 2}
	tr.Tokens, tr.Pieces = []int32{1, 2, 3}, []string{"a", "b", "c"}
	pattern := []float32{1, 0, 0, .5, .5, 0, .2, .3, .5, 1, 0, 0, .9, .1, 0, .1, .1, .8}
	recycled := 0
	tr.PutView("blocks.0.attn.hook_pattern", &trace.Tensor{Shape: []int{2, 3, 3}, Data: pattern}, &trace.Arena{Recycle: func() { recycled++ }})
	grid, err := AttentionGrid(tr)
	require.NoError(t, err)
	captured, err := Captured(tr, "blocks.0.attn.hook_pattern")
	require.NoError(t, err)
	view, err := AttentionView(tr)
	require.NoError(t, err)
	var before [2]bytes.Buffer
	require.NoError(t, grid.Encode(&before[0], "png"))
	require.NoError(t, captured.Encode(&before[1], "png"))
	require.NoError(t, tr.Close())
	require.Equal(t, 1, recycled, "the pattern's memory went back")
	for i := range pattern {
		pattern[i] = 1 - pattern[i] // the next prefill
	}
	var after [2]bytes.Buffer
	require.NoError(t, grid.Encode(&after[0], "png"))
	require.NoError(t, captured.Encode(&after[1], "png"))
	require.Equal(t, before[0].Bytes(), after[0].Bytes(), "AttentionGrid")
	require.Equal(t, before[1].Bytes(), after[1].Bytes(), "Captured")
	require.Contains(t, view.Body, "0.9", "AttentionView's data went into its page")
}

// nb.ShowTensor of a layer's pattern drew tiles named [0], [1], ... with no
// tokens. Each head's tile is named, its queries run down and its keys
// across, labelled: queries beside the first tile of a row of tiles, keys
// under the last row's tiles (so "a" is written three times for two heads
// side by side).
func TestCapturedPatternLabelsHeadsAndTokens(t *testing.T) {
	tr := trace.New()
	tr.Model = trace.Model{Name: "hand", Layers: 1, DModel: 4, Heads: 2, KVHeads: 2, HeadDim: 2, Vocab: 8}
	tr.Tokens, tr.Pieces = []int32{1, 2, 3}, []string{"a", "b", "c"}
	firstKey := []float32{1, 0, 0, 1, 0, 0, 1, 0, 0}
	tr.Put("blocks.0.attn.hook_pattern", &trace.Tensor{Shape: []int{2, 3, 3}, Data: append(slices.Clone(firstKey), firstKey...)})
	fig := must(Captured(tr, "blocks.0.attn.hook_pattern"))
	var rec recorder.Canvas
	fig.paint(&rec)
	count := map[string]int{}
	for _, a := range rec.Actions {
		if s, ok := a.(*recorder.FillString); ok {
			count[s.String]++
		}
	}
	require.Equal(t, 1, count["H0"])
	require.Equal(t, 1, count["H1"])
	for _, l := range []string{"a", "b", "c"} {
		require.Equal(t, 3, count[l], "token %q: once as a query, under each tile as a key", l)
	}

	// One head: key 0's column is tall and on the left, as in AttentionHead.
	column := darkBox(t, must(Captured(handTrace(firstKey), "blocks.0.attn.hook_pattern")))
	topLeft := darkBox(t, must(Captured(handTrace([]float32{1, 0, 0, 0, 0, 0, 0, 0, 0}), "blocks.0.attn.hook_pattern")))
	require.Greater(t, column.Dy(), 2*column.Dx(), "three stacked cells make a tall column")
	require.InDelta(t, column.Min.X, topLeft.Min.X, 2, "key 0 is the first column")
	require.InDelta(t, column.Min.Y, topLeft.Min.Y, 2, "query 0 is the top row")

	// Too many positions for a label per row: every few, and the title says
	// which (ShowTensor of 19 tokens drew none).
	long := trace.New()
	long.Model = tr.Model
	n := 60
	long.Tokens, long.Pieces = make([]int32, n), make([]string, n)
	for i := range n {
		long.Pieces[i] = fmt.Sprintf("t%d", i)
	}
	long.Put("blocks.0.attn.hook_pattern", &trace.Tensor{Shape: []int{2, n, n}, Data: make([]float32, 2*n*n)})
	fig = must(Captured(long, "blocks.0.attn.hook_pattern"))
	rec = recorder.Canvas{}
	fig.paint(&rec)
	count = map[string]int{}
	for _, a := range rec.Actions {
		if s, ok := a.(*recorder.FillString); ok {
			count[s.String]++
		}
	}
	step := 0
	for i := 1; i < n && step == 0; i++ {
		if count[fmt.Sprintf("t%d", i)] > 0 {
			step = i
		}
	}
	require.Greater(t, step, 1, "thinned")
	for i := range n {
		want := 0
		if i%step == 0 {
			want = 3 // a query beside the one row of tiles, a key under each tile
		}
		require.Equal(t, want, count[fmt.Sprintf("t%d", i)], "t%d", i)
	}
	require.Contains(t, fig.Title, fmt.Sprintf("(every %d", step))

	// A continued prefill's one query over 300 keys: its row stays a label
	// high, where square cells drew it half a point high.
	cont := trace.New()
	cont.Model = trace.Model{Name: "hand", Layers: 1, DModel: 2, Heads: 1, KVHeads: 1, HeadDim: 2}
	cont.Tokens, cont.Pieces, cont.Pos0 = []int32{1}, []string{"x"}, 299
	row := make([]float32, 300)
	row[150] = 1
	cont.Put("blocks.0.attn.hook_pattern", &trace.Tensor{Shape: []int{1, 1, 300}, Data: row})
	require.GreaterOrEqual(t, darkBox(t, must(Captured(cont, "blocks.0.attn.hook_pattern"))).Dy(), 10)

	none := trace.New()
	none.Model, none.Tokens = tr.Model, tr.Tokens
	none.Put("blocks.0.attn.hook_pattern", &trace.Tensor{Shape: []int{0, 3, 3}})
	_, err := Captured(none, "blocks.0.attn.hook_pattern")
	require.ErrorContains(t, err, "has no entries to draw")
}

// "0.11" in a heatmap cell: at 7 points and the PNG's resolution each
// "1" is its own run of inked columns, where the font's kerning had drawn
// the second over the first.
func TestOnesInACellStandApart(t *testing.T) {
	c := vgimg.NewWith(vgimg.UseWH(40, 12), vgimg.UseDPI(PNGDPI))
	dc := draw.New(c)
	c.SetColor(color.White)
	c.Fill(dc.Rectangle.Path())
	sty := measured(minText)
	sty.Color = color.Black
	dc.FillText(sty, vg.Point{X: 2, Y: 3}, "11")
	img := c.Image()
	runs, inked := 0, false
	for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
		col := false
		for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
			if r, _, _, _ := img.At(x, y).RGBA(); r < 0x8000 {
				col = true
			}
		}
		if col && !inked {
			runs++
		}
		inked = col
	}
	require.Equal(t, 2, runs, "the two ones of \"11\" as separate runs of ink")
	require.Equal(t, 2*sty.Width("1"), sty.Width("11"), "no kerning in the widths gonum measures")
}

// Each layer gets a panel, titled by its name, on its own components: the
// embedding, whose states are far smaller, spreads over its panel rather
// than collapsing into a blob beside the others. A deep model's panels are
// thinned, evenly, keeping the first and last layers, as the title says.
func TestPCADrawsAPanelPerLayer(t *testing.T) {
	const T, d = 5, 3
	put := func(tr *trace.Trace, name string, scale float32) {
		x := &trace.Tensor{Shape: []int{T, d}, Data: make([]float32, T*d)}
		for i := range x.Data {
			x.Data[i] = scale * (float32((i*7)%5) - 2)
		}
		tr.Put(name, x)
	}
	texts := func(fig *Figure) []string {
		var rec recorder.Canvas
		fig.paint(&rec)
		var out []string
		for _, a := range rec.Actions {
			if s, ok := a.(*recorder.FillString); ok {
				out = append(out, s.String)
			}
		}
		return out
	}
	tr := tokTrace(T, d, 2)
	put(tr, "hook_embed", 0.01)
	put(tr, "blocks.0.hook_resid_post", 10)
	put(tr, "blocks.1.hook_resid_post", 30)
	drawn := texts(must(PCA(tr)))
	for _, stage := range []string{"embed", "L0", "L1"} {
		require.Contains(t, drawn, stage, "a panel titled %s", stage)
	}
	require.Equal(t, 3, strings.Count(strings.Join(drawn, "\n"), "tok1"), "each panel labels its points, the embedding's too")

	deep := tokTrace(T, d, 29)
	for l := range 29 {
		put(deep, fmt.Sprintf("blocks.%d.hook_resid_post", l), float32(l+1))
	}
	fig := must(PCA(deep))
	require.Contains(t, fig.Title, "(8 of 29 layers)")
	drawn = texts(fig)
	shown := []int{0, 4, 8, 12, 16, 20, 24, 28}
	for l := range 29 {
		require.Equal(t, slices.Contains(shown, l), slices.Contains(drawn, fmt.Sprintf("L%d", l)), "layer %d", l)
	}
}

// Layers' colours follow matplotlib's viridis: its value at 0.5 is
// #21918C, and the stops, a ninth apart, interpolate to within 3 of it.
func TestViridisIsViridis(t *testing.T) {
	c := viridis(0.5).(color.RGBA)
	for i, want := range []uint8{0x21, 0x91, 0x8C} {
		require.InDelta(t, want, []uint8{c.R, c.G, c.B}[i], 3, "channel %d of %v", i, c)
	}
	require.Equal(t, color.RGBA{68, 1, 84, 255}, viridis(0))
	require.Equal(t, color.RGBA{253, 231, 37, 255}, viridis(1))
}

// Issue 47.10: data spanning +-1e308 hung gonum's tick search (also
// through nb.Show), a 1e6-point PNG took 7 TB, shape [-1, -1] panicked,
// and a nil trace was dereferenced. Each is an error now, promptly.
func TestHostileFigureInputsAreErrors(t *testing.T) {
	done := make(chan error, 1)
	go func() {
		_, err := Line([]float64{-1e308, 1e308}, "wide")
		if err == nil {
			_, err = XY([]float64{0, 1}, []float64{-1e308, 1e308}, "wide", "x", "y")
		}
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorContains(t, err, "a range wider than float64 holds")
	case <-time.After(10 * time.Second):
		t.Fatal("a figure of values spanning +-1e308 hangs")
	}
	_, err := XY([]float64{-1e308, 1e308}, []float64{0, 1}, "wide x", "x", "y")
	require.ErrorContains(t, err, "viz: XY: the values span -1e+308 to 1e+308")

	f, err := Line([]float64{1, 2}, "big")
	require.NoError(t, err)
	f.Width, f.Height = 1e6, 1e6
	require.ErrorContains(t, f.Encode(io.Discard, "png"), "want at most 268435456 pixels")
	f.Width, f.Height = vg.Length(math.NaN()), 100
	require.ErrorContains(t, f.Encode(io.Discard, "svg"), "want each side from 1 to")

	_, err = Tensor(&trace.Tensor{Shape: []int{-1, -1}, Data: []float32{1}}, "neg")
	require.ErrorContains(t, err, "shape [-1 -1] has a negative axis")

	_, err = AttentionGrid(nil)
	require.EqualError(t, err, "viz: AttentionGrid of a nil trace")
	_, err = TokenLoss(nil)
	require.EqualError(t, err, "viz: TokenLoss of a nil trace")
	require.EqualError(t, Export(nil, t.TempDir()), "viz: Export of a nil trace")
	require.EqualError(t, Report(nil, t.TempDir()), "viz: Report of a nil trace")
	_, err = Captured(nil, "logits")
	require.EqualError(t, err, "viz: Captured of a nil trace")
}

// Value axes are ticked at round numbers written as short as they are:
// gonum's default ticker wrote DLA's bars as -2.50, 0.00 and 2.50.
func TestValueTicksAreWrittenShort(t *testing.T) {
	numbers := func(f *Figure) []string {
		var rec recorder.Canvas
		f.paint(&rec)
		var out []string
		for _, a := range rec.Actions {
			if s, ok := a.(*recorder.FillString); ok {
				if _, err := strconv.ParseFloat(s.String, 64); err == nil {
					out = append(out, s.String)
				}
			}
		}
		return out
	}
	bars := must(Bars([]string{"a", "b", "c"}, []float64{-2.9, 0.4, 3.2}, "dla", "logit"))
	require.Equal(t, []string{"-3", "-2", "-1", "0", "1", "2", "3"}, numbers(bars))
	line := must(Line([]float64{0.1, 0.35, 0.2, 0.6}, "loss"))
	for _, s := range numbers(line) {
		require.NotRegexp(t, `\.\d*0$|^-?0\.0+$`, s, "a tick label with trailing zeros")
	}
	require.Contains(t, numbers(line), "0.5")
}
