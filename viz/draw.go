package viz

import (
	"fmt"
	"image"
	"image/color"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// scale maps values in [lo, hi] to colours; values outside are clamped.
// Its colour bar is ticked at the multiples of step.
type scale struct {
	lo, hi, step float64
	at           func(t float64) color.Color // t in [0, 1]
}

var nanColor = color.RGBA{200, 200, 200, 255}

// deepRed and deepBlue end every colour scale in viz, plots and HTML views
// alike (ColorBrewer's RdBu): white is zero, red above it, blue below.
var (
	deepRed  = color.RGBA{178, 24, 43, 255}
	deepBlue = color.RGBA{33, 102, 172, 255}
)

// shade is the colour of t in [-1, 1] (clamped): white at 0, fading
// linearly to deepRed at 1 and deepBlue at -1.
func shade(t float64) color.RGBA {
	end := deepRed
	if t < 0 {
		end, t = deepBlue, -t
	}
	t = min(t, 1)
	fade := func(c uint8) uint8 { return uint8(math.Round(255 - t*(255-float64(c)))) }
	return color.RGBA{fade(end.R), fade(end.G), fade(end.B), 255}
}

// sequential is white at lo and deep red at hi, each end rounded out to
// a tick of its colour bar (barEnds): the red half of diverging, for
// values that are never negative.
func sequential(lo, hi float64) scale {
	lo, hi = widen(lo, hi)
	lo, hi, step := barEnds(lo, hi, 2, 5)
	return scale{lo, hi, step, func(t float64) color.Color { return shade(t) }}
}

// diverging is blue below zero, white at zero and red above, symmetric,
// its ends rounded out to a tick of its colour bar (barEnds), which is
// ticked at 0 and symmetrically about it.
func diverging(lim float64) scale {
	_, lim = widen(-lim, lim)
	_, lim, step := barEnds(0, lim, 1, 4)
	return scale{-lim, lim, step, func(t float64) color.Color { return shade(2*t - 1) }}
}

// barEnds rounds lo and hi out to multiples of a round step (1, 2, 2.5 or
// 5 times a power of ten), between fewest and most steps apart, so that a
// colour bar has a tick at each end: its top tick had been 0.18 on a bar
// running to 0.197, and nothing marked where the colours ended. An end
// within a twentieth of the range of a tick stays where it is (0.41 beside
// a tick at 0.4): moving it would pale the colours for no gain. Of the
// steps that fit it takes the one that stretches the range least, the
// larger one when two stretch it alike.
func barEnds(lo, hi float64, fewest, most int) (float64, float64, float64) {
	span := hi - lo
	if !(span > 0) || math.IsInf(span, 0) {
		return lo, hi, 0
	}
	tol := span / 20
	out := func(v, step float64, up bool) float64 {
		if up {
			if t := math.Floor(v/step) * step; v-t <= tol {
				return v
			}
			return math.Ceil(v/step) * step
		}
		if t := math.Ceil(v/step) * step; t-v <= tol {
			return v
		}
		return math.Floor(v/step) * step
	}
	bestLo, bestHi, best, cost := lo, hi, 0.0, math.Inf(1)
	for _, step := range roundSteps(span/float64(most+1), span, true) {
		l, h := out(lo, step, false), out(hi, step, true)
		n := int(math.Floor(h/step+1e-9) - math.Ceil(l/step-1e-9)) // steps between the outer ticks
		if n < fewest || n > most {
			continue
		}
		if c := (h - l) / span; c <= cost*(1+1e-9) {
			bestLo, bestHi, best, cost = l, h, step, c
		}
	}
	return bestLo, bestHi, best
}

// roundSteps are the round steps (1, 2, 2.5 and 5 times a power of ten;
// without quarters, no 2.5) from about lo up to hi, in increasing order;
// none unless 0 < lo <= hi, both finite (a range that underflows to 0 or
// overflows to Inf would otherwise never end the loop).
func roundSteps(lo, hi float64, quarters bool) []float64 {
	mantissas := []float64{1, 2, 2.5, 5}
	if !quarters {
		mantissas = []float64{1, 2, 5}
	}
	if !(lo > 0 && lo <= hi) || math.IsInf(hi, 0) {
		return nil
	}
	var out []float64
	for e := math.Floor(math.Log10(lo)); e <= math.Floor(math.Log10(hi)); e++ {
		p := math.Pow(10, e)
		for _, m := range mantissas {
			if s := m * p; s >= lo/2 && s <= hi {
				out = append(out, s)
			}
		}
	}
	return out
}

// roundTicks ticks an axis at the multiples of a round step (1, 2 or 5
// times a power of ten), so 0 is labelled wherever the axis crosses
// it: gonum's ticker, free to start anywhere, labelled -9, -3 and 3 on an
// axis from -9 to 3.4. It labels the fewest multiples that are still at
// least fewest, with unlabelled ticks halfway between; step, when not 0,
// is the smallest step it may take (a colour bar's, whose ends are its
// multiples, and which may be 2.5 times a power of ten).
type roundTicks struct {
	fewest int
	step   float64
}

func (rt roundTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return nil
	}
	count := func(step float64) int {
		return int(math.Floor(hi/step+1e-9) - math.Ceil(lo/step-1e-9) + 1)
	}
	// 2.5 times a power of ten only as a colour bar's step; none for a
	// range too small or too large for float64 steps.
	steps := roundSteps((hi-lo)/20, hi-lo, rt.step > 0)
	if len(steps) == 0 {
		return plot.DefaultTicks{}.Ticks(lo, hi)
	}
	step := steps[0]
	outer := func(step float64) [2]float64 {
		return [2]float64{math.Ceil(lo/step-1e-9) * step, math.Floor(hi/step+1e-9) * step}
	}
	for _, s := range steps {
		if s < rt.step*(1-1e-9) || rt.step > 0 && (!wholeMultiple(s, rt.step) || !sameTicks(outer(s), outer(rt.step), rt.step)) {
			continue // a bar keeps the ticks at (or next to) its ends
		}
		if count(s) < rt.fewest {
			break
		}
		step = s
	}
	if rt.step > 0 && step < rt.step {
		step = rt.step
	}
	e := math.Floor(math.Log10(step) + 1e-9)
	quarter := 0 // 0.25 needs a decimal more than 0.2
	if math.Abs(step/math.Pow(10, e)-2.5) < 1e-9 {
		quarter = 1
	}
	decimals := max(0, quarter-int(e))
	// Half steps k from first to last, counted as an int: a float k stops
	// counting past 2^53, and 2*hi overflows near float64's end.
	first, last := math.Ceil(lo/step*2-1e-9), math.Floor(hi/step*2+1e-9)
	if !(last-first < 1000) || max(math.Abs(first), math.Abs(last)) > 1<<51 {
		return plot.DefaultTicks{}.Ticks(lo, hi)
	}
	var ticks []plot.Tick
	for i := range int(last-first) + 1 {
		k := first + float64(i)
		v := k * step / 2
		t := plot.Tick{Value: v}
		if math.Mod(k, 2) == 0 {
			t.Label = fixed(v, decimals)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// sameTicks says whether a and b are the same ticks, to a millionth of
// step.
func sameTicks(a, b [2]float64, step float64) bool {
	return math.Abs(a[0]-b[0]) < step*1e-6 && math.Abs(a[1]-b[1]) < step*1e-6
}

// wholeMultiple says whether a is a whole multiple of b.
func wholeMultiple(a, b float64) bool {
	r := a / b
	return math.Abs(r-math.Round(r)) < 1e-9
}

// fixed writes v with the given number of decimals, and as "0" where it
// rounds to zero at them: never "-0.00", and no "0.00" beside "0.41".
func fixed(v float64, decimals int) string {
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	if strings.Trim(s, "-0.") == "" {
		return "0"
	}
	return s
}

// widen keeps a colour scale from collapsing when every value is equal.
func widen(lo, hi float64) (float64, float64) {
	if !(hi > lo) {
		return lo - 0.5, lo + 0.5
	}
	return lo, hi
}

// color is v's colour, grey where v is not finite: a masked attention
// score (-Inf) had taken the bar's deepest blue, a very negative score's.
func (s scale) color(v float64) color.Color {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nanColor
	}
	return s.at((v - s.lo) / (s.hi - s.lo))
}

// finiteRange is the range of the finite values of z, or [0, 1] if none.
func finiteRange(z [][]float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, row := range z {
		for _, v := range row {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	if lo > hi {
		return 0, 1
	}
	return lo, hi
}

// checkSpan refuses values whose range float64 cannot hold (+-1e308: hi-lo
// is +Inf), on which gonum's tick search never ends.
func checkSpan(figure string, vs ...[]float64) error {
	if lo, hi := finiteRange(vs); math.IsInf(hi-lo, 0) {
		return fmt.Errorf("viz: %s: the values span %g to %g, a range wider than float64 holds: scale them first", figure, lo, hi)
	}
	return nil
}

func maxAbs(z [][]float64) float64 {
	lo, hi := finiteRange(z)
	return max(math.Abs(lo), math.Abs(hi))
}

// raster paints z (row 0 at the top) with each cell a block of pixels,
// sized so the image is about px pixels each way: nearest-neighbour cells
// stay sharp when a viewer scales the image.
func raster(z [][]float64, sc scale, px int) *image.RGBA {
	rows, cols := len(z), len(z[0])
	kx, ky := max(1, px/cols), max(1, px/rows)
	img := image.NewRGBA(image.Rect(0, 0, cols*kx, rows*ky))
	for r, row := range z {
		for c, v := range row {
			col := color.RGBAModel.Convert(sc.color(v)).(color.RGBA)
			for y := r * ky; y < (r+1)*ky; y++ {
				for x := c * kx; x < (c+1)*kx; x++ {
					img.SetRGBA(x, y, col)
				}
			}
		}
	}
	return img
}

// Text sizes, in points. minText is the smallest text in any figure, what
// its cells and points are labelled with: 12 pixels in a PNG at 96 dpi, so
// that a figure shown 1280 pixels wide on a classroom projector is
// readable (issue 49 measured cell text of 7 to 8 pixels). Text that does
// not fit at it is thinned, cut with an ellipsis or left out, never drawn
// smaller. Ticks and legends are a point larger, axis names larger still.
const (
	minText  = 9
	tickText = 10
	axisText = 11
)

// labelGap is the room a row of level labels, or a rotated label, needs
// across: a tick label's height.
const labelGap = tickText + 2

// measured is a style of sans at size points, for measuring text.
func measured(size vg.Length) text.Style {
	return text.Style{Font: font.From(sans, size), Handler: plot.DefaultTextHandler}
}

func newPlot(title string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font = font.From(sans, 12)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = font.From(sans, axisText)
		a.Tick.Label.Font = font.From(sans, tickText)
		// gonum's default gave every label its decimals: -2.50, 0.00, 2.50.
		a.Tick.Marker = roundTicks{fewest: 4}
	}
	p.Legend.TextStyle.Font = font.From(sans, tickText)
	return p
}

// grid describes a heatmap: z[row][col], labels for rows and columns, and
// whether row 0 sits at the top (a matrix) or at the bottom (layers
// stacked upward).
type grid struct {
	z            [][]float64
	rows, cols   []string
	xName, yName string
	rowsUp       bool
}

// heatPlot draws g as an image with nominal tick labels, thinned so they
// do not overlap given the expected cell width and height in points.
func heatPlot(title string, g grid, sc scale, cellW, cellH vg.Length) *plot.Plot {
	z, rowLabels := g.z, g.rows
	if g.rowsUp {
		z, rowLabels = reversed(z), reversed(rowLabels)
	}
	n, m := len(z), len(z[0])
	p := newPlot(title)
	p.Add(plotter.NewImage(raster(z, sc, 800), -0.5, -0.5, float64(m)-0.5, float64(n)-0.5))
	p.X.Label.Text, p.Y.Label.Text = g.xName, g.yName
	gapX := cellW // every label
	switch {
	case upright(g.cols, cellW):
		p.X.Tick.Label.Rotation = math.Pi / 2
		p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
		gapX = labelGap
	case collide(g.cols, cellW):
		gapX = labelWidth(g.cols) + 8
	}
	p.X.Tick.Marker = nominal(g.cols, false, cellW, gapX)
	p.Y.Tick.Marker = nominal(rowLabels, true, cellH, labelGap)
	p.X.Label.Text = withNote(p.X.Label.Text, everyNth(labelStep(cellW, gapX), ""))
	p.Y.Label.Text = withNote(p.Y.Label.Text, everyNth(labelStep(cellH, labelGap), ""))
	p.X.Padding, p.Y.Padding = 0, 0
	return p
}

// upright says whether column labels cell points apart are drawn rotated:
// when level ones would collide, unless all are short (numbers), which
// stay level and are thinned instead.
func upright(labels []string, cell vg.Length) bool {
	return longest(labels) > 3 && collide(labels, cell)
}

// collide says whether level labels centred cell points apart would touch.
func collide(labels []string, cell vg.Length) bool {
	sty := measured(tickText)
	for i := 1; i < len(labels); i++ {
		if (sty.Width(labels[i-1])+sty.Width(labels[i]))/2+3 > cell {
			return true
		}
	}
	return false
}

// xLabelRoom is the room below a heatmap for its column labels and name.
func xLabelRoom(labels []string, cell vg.Length) vg.Length {
	if upright(labels, cell) {
		return labelMargin(labels)
	}
	return 40
}

func longest(labels []string) int {
	n := 0
	for _, l := range labels {
		n = max(n, utf8.RuneCountInString(l))
	}
	return n
}

// annotate writes texts[r][c] on the cells of g as heatPlot draws it, in
// black or white, whichever shows on the cell's colour.
func annotate(p *plot.Plot, g grid, sc scale, texts [][]string, size vg.Length) error {
	var at plotter.XYs
	var all []string
	var styles []text.Style
	n := len(g.z)
	for r, row := range texts {
		y := float64(n - 1 - r)
		if g.rowsUp {
			y = float64(r)
		}
		for c, s := range row {
			at = append(at, plotter.XY{X: float64(c), Y: y})
			all = append(all, s)
			styles = append(styles, text.Style{Color: contrast(sc.color(g.z[r][c])), Font: font.From(sans, size),
				XAlign: draw.XCenter, YAlign: draw.YCenter, Handler: p.TextHandler})
		}
	}
	labels, err := plotter.NewLabels(plotter.XYLabels{XYs: at, Labels: all})
	if err != nil {
		return err
	}
	labels.TextStyle = styles
	p.Add(labels)
	return nil
}

// contrast is black or white, whichever has the higher WCAG contrast
// ratio with the opaque colour c.
func contrast(c color.Color) color.Color {
	r, g, b, _ := c.RGBA()
	l := 0.2126*linear(r) + 0.7152*linear(g) + 0.0722*linear(b)
	// Black's ratio (l+0.05)/0.05 beats white's 1.05/(l+0.05).
	if (l+0.05)*(l+0.05) > 0.05*1.05 {
		return color.Black
	}
	return color.White
}

// linear undoes sRGB's gamma on a 16-bit channel.
func linear(v uint32) float64 {
	s := float64(v) / 0xffff
	if s <= 0.04045 {
		return s / 12.92
	}
	return math.Pow((s+0.055)/1.055, 2.4)
}

// nominal places labels at 0, 1, ...; top-down labels count from the top.
// It keeps every step-th label so that labels of cells cell points apart
// are at least gap apart.
func nominal(labels []string, topDown bool, cell, gap vg.Length) plot.ConstantTicks {
	step := labelStep(cell, gap)
	n := len(labels)
	var ticks []plot.Tick
	for i := range n {
		v := float64(i)
		if topDown {
			v = float64(n - 1 - i)
		}
		t := plot.Tick{Value: v} // unlabelled: a minor tick, so a skip shows
		if i%step == 0 {
			t.Label = labels[i]
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// labelStep is how many cells apart nominal labels them.
func labelStep(cell, gap vg.Length) int { return max(1, int(math.Ceil(float64(gap/cell)))) }

// everyNth says which labels a thinned axis shows: "", "every 2nd
// labelled", ... ("every 2nd token labelled" with noun "token ").
func everyNth(step int, noun string) string {
	if step <= 1 {
		return ""
	}
	suffix := "th"
	switch {
	case step%100 >= 11 && step%100 <= 13:
	case step%10 == 1:
		suffix = "st"
	case step%10 == 2:
		suffix = "nd"
	case step%10 == 3:
		suffix = "rd"
	}
	return fmt.Sprintf("every %d%s %slabelled", step, suffix, noun)
}

func reversed[T any](s []T) []T {
	r := make([]T, len(s))
	for i, v := range s {
		r[len(s)-1-i] = v
	}
	return r
}

// barPlot is a vertical colour bar for sc.
func barPlot(sc scale, label string) *plot.Plot {
	const steps = 256
	z := make([][]float64, steps)
	for i := range z {
		z[i] = []float64{sc.hi - (sc.hi-sc.lo)*(float64(i)+0.5)/steps}
	}
	p := newPlot("")
	p.Add(plotter.NewImage(raster(z, sc, steps), 0, sc.lo, 1, sc.hi))
	p.HideX()
	p.X.Padding, p.Y.Padding = 0, 0
	p.Y.Label.Text = label
	p.Y.Tick.Marker = roundTicks{fewest: 3, step: sc.step}
	return p
}

// barWidth is the room a colour bar takes at the right of a heatmap.
const barWidth = 62

// withBar draws p and, to its right, bar spanning p's data area.
func withBar(p, bar *plot.Plot) func(c draw.Canvas) {
	return func(c draw.Canvas) {
		main := draw.Crop(c, 0, -barWidth, 0, 0)
		p.Draw(main)
		data := p.DataCanvas(main)
		b := c
		b.Min.X, b.Min.Y, b.Max.Y = c.Max.X-barWidth+8, data.Min.Y, data.Max.Y
		bar.Draw(b)
	}
}

// maxSpan bounds the cells of a figure down the page, in points, so a
// long prompt makes thinner cells (and fewer labels) rather than a huge
// image.
const maxSpan = 1600

// maxWidth bounds a figure's width, in points: 960 CSS pixels, about a
// notebook's output column. A wider figure is shrunk to fit (its labels
// unreadable) or must be scrolled; a long token axis gets thinner cells and
// every k-th label instead.
const maxWidth = 720

// cellSize fits n cells into about span points, between lo and hi each,
// and all n within room points, which overrides lo.
func cellSize(n int, span, lo, hi, room vg.Length) vg.Length {
	return min(max(span/vg.Length(n), lo), hi, room/vg.Length(n))
}

// rowHeight is the height of n rows (layers) beside columns cellW wide:
// square while columns are wide and rows few; many rows share about
// rowsSpan points, none thinner than 14 (a cell's number fits) unless
// there are more rows than maxSpan allows.
func rowHeight(cellW vg.Length, n int) vg.Length {
	return min(max(cellW, 12), maxSpan/vg.Length(n), max(14, rowsSpan/vg.Length(n)))
}

// rowsSpan is the height many rows share: a 36-layer model's heatmap, or
// one row per head, stays about a screen tall.
const rowsSpan = 640

// label makes a token's display string fit an axis: leading spaces (and a
// piece of only spaces) shown as middle dots, as the HTML views show them
// (" (" is "·(", which a bare space had drawn as "("), long pieces cut, and
// control characters and bytes that are not UTF-8 escaped as the
// tokenizer's pieces already are (\n, \t, \r, \xAB), so a piece is
// escaped once whichever it comes as. Spaces after the first other
// character stay: a caller's label "layer 0" reads as it is.
func label(piece string) string {
	const maxRunes = 14
	rest := strings.TrimLeft(piece, " ")
	if rest == "" {
		rest = strings.TrimRight(piece, " ") // only spaces: every one a dot
	}
	piece = strings.Repeat("·", len(piece)-len(rest)) + rest
	var b strings.Builder
	for i := 0; i < len(piece); {
		r, size := utf8.DecodeRuneInString(piece[i:])
		switch {
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == utf8.RuneError && size == 1, r < 0x20, r == 0x7f:
			fmt.Fprintf(&b, `\x%02X`, piece[i])
		case !unicode.IsPrint(r) && r != ' ':
			b.WriteString(strings.Trim(strconv.QuoteRune(r), "'"))
		default:
			b.WriteString(piece[i : i+size])
		}
		i += size
	}
	s := b.String()
	if utf8.RuneCountInString(s) > maxRunes {
		s = string([]rune(s)[:maxRunes-1]) + "…"
	}
	return s
}

// positionLabels labels positions pos0 .. pos0+n-1 by their tokens; earlier
// positions, whose tokens this trace does not hold, by number.
func positionLabels(pieces []string, pos0, first, n int) []string {
	out := make([]string, n)
	for i := range out {
		p := first + i
		if j := p - pos0; j >= 0 && j < len(pieces) {
			out[i] = label(pieces[j])
		} else {
			out[i] = fmt.Sprintf("#%d", p)
		}
	}
	return out
}

// drawTitle writes a figure's title across the top of c.
func drawTitle(c draw.Canvas, title string) {
	sty := text.Style{Color: color.Black, Font: font.From(sans, 12), Handler: plot.DefaultTextHandler,
		XAlign: draw.XCenter, YAlign: draw.YTop}
	c.FillText(sty, vg.Point{X: (c.Min.X + c.Max.X) / 2, Y: c.Max.Y - 6}, title)
}

// withNote adds a note to an axis name: "position (every 2nd labelled)",
// "position (input token; every 2nd labelled)".
func withNote(name, note string) string {
	switch {
	case note == "":
		return name
	case name == "":
		return "(" + note + ")"
	case strings.HasSuffix(name, ")"):
		return name[:len(name)-1] + "; " + note + ")"
	}
	return name + " (" + note + ")"
}
