package viz

import (
	"cmp"
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/stratalab/strata/trace"
)

// Plot makes a figure of a gonum plot the caller built, width by height
// points (480 by 320 when zero), so it exports like every other figure.
// Of a nil plot it is a figure that Encode refuses.
func Plot(p *plot.Plot, width, height vg.Length) *Figure {
	if p == nil {
		return &Figure{Title: "nil plot", Width: max(width, 1), Height: max(height, 1)}
	}
	if width <= 0 {
		width = 480
	}
	if height <= 0 {
		height = 320
	}
	return &Figure{Title: p.Title.Text, Width: width, Height: height, draw: p.Draw}
}

// Line draws y against its index.
func Line(y []float64, title string) (*Figure, error) {
	if len(y) == 0 {
		return nil, fmt.Errorf("viz: Line: no values")
	}
	if err := checkSpan("Line", y); err != nil {
		return nil, err
	}
	xy := make(plotter.XYs, len(y))
	for i, v := range y {
		if math.IsNaN(v) || math.IsInf(v, 0) { // gonum said only "plotter: NaN data point"
			return nil, fmt.Errorf("viz: Line: value %d of %d is %v: a line has no point to draw there", i, len(y), v)
		}
		xy[i] = plotter.XY{X: float64(i), Y: v}
	}
	line, err := plotter.NewLine(xy)
	if err != nil {
		return nil, fmt.Errorf("viz: Line: %w", err)
	}
	line.Color, line.Width = seriesColors[0], 1.5
	p := newPlot(title)
	p.X.Label.Text, p.Y.Label.Text = "index", "value"
	p.Add(line)
	return newFigure(title, 480, 320, p.Draw), nil
}

// Heatmap draws z[row][col], row 0 at the top, rows and columns labelled
// by rowLabels and colLabels (numbered where nil): blue-white-red centred
// on zero when any value is negative, white to red otherwise. Columns
// beyond a thousand are averaged in blocks (without column labels, which
// would no longer name them; numbered by each block's first column).
func Heatmap(z [][]float64, rowLabels, colLabels []string, title string) (*Figure, error) {
	const name = "Heatmap"
	if rowLabels != nil && len(rowLabels) != len(z) {
		return nil, fmt.Errorf("viz: %s: %d row labels for %d rows", name, len(rowLabels), len(z))
	}
	if colLabels != nil && (len(z) == 0 || len(colLabels) != len(z[0])) {
		return nil, fmt.Errorf("viz: %s: %d column labels for a %d-row z whose first row has %d values", name, len(colLabels), len(z), len(firstRow(z)))
	}
	if colLabels != nil && len(colLabels) > 1024 {
		return nil, fmt.Errorf("viz: %s: %d labelled columns; past 1024 columns are averaged in blocks, which labels cannot name: leave colLabels nil", name, len(colLabels))
	}
	ax := axes{cols: colLabels}
	for _, s := range rowLabels {
		ax.rows = append(ax.rows, label(s))
	}
	return heatmap(name, title, z, ax)
}

func firstRow(z [][]float64) []float64 {
	if len(z) == 0 {
		return nil
	}
	return z[0]
}

// axes names a heatmap's axes and labels its rows (tokens); empty ones
// are numbered.
type axes struct {
	rows, cols   []string
	xName, yName string
}

func heatmap(name, title string, z [][]float64, ax axes) (*Figure, error) {
	if len(z) == 0 || len(z[0]) == 0 {
		return nil, fmt.Errorf("viz: %s: no values", name)
	}
	for r, row := range z {
		if len(row) != len(z[0]) {
			return nil, fmt.Errorf("viz: %s: row %d has %d values, row 0 has %d", name, r, len(row), len(z[0]))
		}
	}
	g := grid{z: z, rows: ax.rows, cols: numbers(len(z[0])), xName: cmp.Or(ax.xName, "index 1"), yName: cmp.Or(ax.yName, "index 0")}
	if k := (len(z[0]) + 1023) / 1024; k > 1 {
		z = meanPool(z, k)
		title = fmt.Sprintf("%s (columns averaged in blocks of %d)", title, k)
		// Each block by its first column: numbered 0, 1, ..., an axis of
		// 2,048 logits ran to 1,023.
		for i := range z[0] {
			g.cols[i] = g.cols[i*k]
		}
		g.z, g.cols, g.xName = z, g.cols[:len(z[0])], g.xName+" (a block's first)"
	}
	if g.rows == nil {
		g.rows = numbers(len(z))
	}
	for i, s := range ax.cols {
		g.cols[i] = label(s)
	}
	sc := scaleFor(z)
	extra := labelMargin(g.rows) + barWidth + 30
	cellW := cellSize(len(z[0]), 520, 1, 32, maxWidth-extra)
	cellH := min(max(cellW, 10), 24, maxSpan/vg.Length(len(z))) // a row label's height
	return newFigure(title, vg.Length(len(z[0]))*cellW+extra, vg.Length(len(z))*cellH+xLabelRoom(g.cols, cellW)+60,
		withBar(heatPlot(title, g, sc, cellW, cellH), barPlot(sc, "value"))), nil
}

// scaleFor is diverging where any value is below zero, so that blue
// always means negative (log-probabilities, all below zero, took the
// sequential scale's white to red, the least negative deepest), and
// sequential where none is.
func scaleFor(z [][]float64) scale {
	lo, hi := finiteRange(z)
	if lo < 0 {
		return diverging(max(-lo, hi))
	}
	return sequential(lo, hi)
}

func numbers(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprint(i)
	}
	return s
}

// meanPool averages each row's columns in blocks of k.
func meanPool(z [][]float64, k int) [][]float64 {
	out := make([][]float64, len(z))
	for r, row := range z {
		for c := 0; c < len(row); c += k {
			sum, n := 0.0, 0
			for _, v := range row[c:min(c+k, len(row))] {
				sum, n = sum+v, n+1
			}
			out[r] = append(out[r], sum/float64(n))
		}
	}
	return out
}

// Tensor draws a tensor by its shape: 1-D as a line, 2-D as a heatmap,
// 3-D as one heatmap per index of the first axis (at most 16), all on one
// colour scale.
func Tensor(x *trace.Tensor, title string) (*Figure, error) {
	return tensorFigure(title, x, axes{})
}

// Captured draws the tensor a trace captured under name as Tensor does,
// with positions labelled by token; a 3-D tensor whose first axis is
// positions ([T, heads, head_dim]) is drawn as [T, heads*head_dim], and a
// layer's attention pattern or scores ([heads, T, keys]) as a tile per head
// with its queries and keys labelled.
func Captured(tr *trace.Trace, name string) (*Figure, error) {
	if tr == nil {
		return nil, nilTrace("Captured")
	}
	if !tr.Has(name) {
		return nil, missing("Captured", name, captureHint(name))
	}
	x, err := copyOf(tr, name)
	if err != nil {
		return nil, fmt.Errorf("viz: Captured: %w", err)
	}
	var ax axes
	title := name
	if _, local := trace.SplitPoint(name); trace.IsAttentionMap(name) &&
		len(x.Shape) == 3 && len(tr.Tokens) > 0 && x.Shape[1] == len(tr.Tokens) && x.Shape[2] == tr.Pos0+len(tr.Tokens) {
		queries := positionLabels(tr.Pieces, tr.Pos0, tr.Pos0, x.Shape[1])
		keys := positionLabels(tr.Pieces, tr.Pos0, 0, x.Shape[2])
		return headTiles(fmt.Sprintf("%s %v: queries down, keys across", name, x.Shape), x, queries, keys, local == trace.AttnPattern)
	}
	if len(x.Shape) >= 2 && len(tr.Tokens) > 0 {
		if n := x.Shape[0]; n == len(tr.Tokens) || n == tr.Pos0+len(tr.Tokens) {
			ax = axes{rows: positionLabels(tr.Pieces, tr.Pos0, n-len(tr.Tokens), n), yName: "position"}
			if len(x.Shape) == 3 {
				title = fmt.Sprintf("%s %v as", name, x.Shape)
				ax.xName = "index 1 × index 2"
				x = &trace.Tensor{Shape: []int{n, x.Shape[1] * x.Shape[2]}, Data: x.Data}
			}
		}
	}
	return tensorFigure(title, x, ax)
}

func tensorFigure(title string, x *trace.Tensor, ax axes) (*Figure, error) {
	const name = "Tensor"
	if x == nil {
		return nil, fmt.Errorf("viz: %s: a nil tensor", name)
	}
	if n := elements(x.Shape); n < 0 {
		return nil, fmt.Errorf("viz: %s: shape %v has a negative axis, or more values than an int counts", name, x.Shape)
	} else if len(x.Data) != n || n == 0 {
		return nil, fmt.Errorf("viz: %s: shape %v wants %d values, the tensor holds %d", name, x.Shape, n, len(x.Data))
	}
	if title == "" {
		title = fmt.Sprintf("tensor %v", x.Shape)
	} else {
		title = fmt.Sprintf("%s %v", title, x.Shape)
	}
	switch len(x.Shape) {
	case 1:
		return Line(float64s(x.Data), title)
	case 2:
		return heatmap(name, title, matrix(x.Data, x.Shape[0], x.Shape[1]), ax)
	case 3:
		return slices3(title, x)
	}
	return nil, fmt.Errorf("viz: %s: cannot draw a %d-D tensor (shape %v): slice it to 3 axes or fewer", name, len(x.Shape), x.Shape)
}

func float64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func matrix(v []float32, rows, cols int) [][]float64 {
	z := make([][]float64, rows)
	for r := range z {
		z[r] = float64s(v[r*cols : (r+1)*cols])
	}
	return z
}

// slices3 draws the first 16 [b, c] slices of an [a, b, c] tensor as
// tiles, four across, on one colour scale.
func slices3(title string, x *trace.Tensor) (*Figure, error) {
	a, b, c := x.Shape[0], x.Shape[1], x.Shape[2]
	n := min(a, 16)
	if n < a {
		title = fmt.Sprintf("%s, first %d of %d", title, n, a)
	}
	tiles := make([][][]float64, n)
	lo, hi := math.Inf(1), math.Inf(-1)
	for i := range tiles {
		tiles[i] = maxPoolAbs(matrix(x.Data[i*b*c:(i+1)*b*c], b, c), 256)
		l, h := finiteRange(tiles[i])
		lo, hi = min(lo, l), max(hi, h)
	}
	sc := scaleFor([][]float64{{lo, hi}})
	across := min(n, 4)
	down := (n + across - 1) / across
	const gap, labelH, titleH = 8, 14, 28
	tileW := (maxWidth-barWidth-16)/vg.Length(across) - gap
	tileH := min(tileW*vg.Length(b)/vg.Length(c), 2*tileW)
	width := vg.Length(across)*(tileW+gap) + barWidth + 16
	height := titleH + vg.Length(down)*(tileH+labelH+gap) + 12
	return newFigure(title, width, height, func(cv draw.Canvas) {
		drawTitle(cv, title)
		sty := text.Style{Color: color.Black, Font: font.From(sans, tickText), Handler: plot.DefaultTextHandler,
			XAlign: draw.XCenter, YAlign: draw.YCenter}
		top := cv.Max.Y - titleH
		for i, z := range tiles {
			x0 := cv.Min.X + vg.Length(i%across)*(tileW+gap)
			y1 := top - vg.Length(i/across)*(tileH+labelH+gap) - labelH
			cv.FillText(sty, vg.Point{X: x0 + tileW/2, Y: y1 + labelH/2}, fmt.Sprintf("[%d]", i))
			r := vg.Rectangle{Min: vg.Point{X: x0, Y: y1 - tileH}, Max: vg.Point{X: x0 + tileW, Y: y1}}
			cv.DrawImage(r, raster(z, sc, 2*int(tileW)))
		}
		bar := cv
		bar.Min.X = cv.Min.X + vg.Length(across)*(tileW+gap) + 6
		bar.Max.X = bar.Min.X + barWidth - 8
		bar.Max.Y = top - labelH
		bar.Min.Y = max(top-vg.Length(down)*(tileH+labelH+gap)+gap, bar.Max.Y-2*tileW)
		barPlot(sc, "value").Draw(bar)
	}), nil
}

// maxPoolAbs shrinks z to at most n rows and columns, each cell the value
// of largest magnitude in its block, so that a thumbnail keeps its peaks.
func maxPoolAbs(z [][]float64, n int) [][]float64 {
	rows, cols := len(z), len(z[0])
	k := (max(rows, cols) + n - 1) / n
	if k <= 1 {
		return z
	}
	out := make([][]float64, (rows+k-1)/k)
	for r := range out {
		out[r] = make([]float64, (cols+k-1)/k)
		for c := range out[r] {
			for i := r * k; i < min((r+1)*k, rows); i++ {
				for j := c * k; j < min((c+1)*k, cols); j++ {
					if math.Abs(z[i][j]) > math.Abs(out[r][c]) {
						out[r][c] = z[i][j]
					}
				}
			}
		}
	}
	return out
}
