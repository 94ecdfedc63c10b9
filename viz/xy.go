package viz

import (
	"fmt"
	"image/color"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// XY draws y against x as a line with points, axes labelled: a metric over
// a sweep (steering strength, a layer, a position). x nil is 0, 1, ...
// (layers). Where the values cross zero a grey line marks it, so a sign
// flip shows.
func XY(x, y []float64, title, xLabel, yLabel string) (*Figure, error) {
	return lines("XY", title, xLabel, yLabel, indexOr(x, len(y)), []Series{{Y: y}})
}

// indexOr is x, or 0, 1, ..., n-1 when x is nil.
func indexOr(x []float64, n int) []float64 {
	if x != nil {
		return x
	}
	x = make([]float64, n)
	for i := range x {
		x[i] = float64(i)
	}
	return x
}

// Series is one line of Lines: its name in the legend and its values.
type Series struct {
	Name string
	Y    []float64
}

// Lines draws several series against the same x, each in its own colour
// and named in a legend: a token's probability by layer for two prompts,
// a metric for each of several heads. x nil is 0, 1, ... (layers).
func Lines(x []float64, series []Series, title, xLabel, yLabel string) (*Figure, error) {
	if len(series) == 0 {
		return nil, fmt.Errorf("viz: Lines: no series")
	}
	x = indexOr(x, len(series[0].Y))
	if len(series) > len(lineColors) {
		return nil, fmt.Errorf("viz: Lines: %d series, more than the %d colours that stay apart", len(series), len(lineColors))
	}
	return lines("Lines", title, xLabel, yLabel, x, series)
}

// lineColors are Tableau's ten, which stay apart for most readers.
var lineColors = []color.Color{
	color.RGBA{31, 119, 180, 255}, color.RGBA{214, 39, 40, 255}, color.RGBA{44, 160, 44, 255}, color.RGBA{255, 127, 14, 255},
	color.RGBA{148, 103, 189, 255}, color.RGBA{140, 86, 75, 255}, color.RGBA{227, 119, 194, 255}, color.RGBA{127, 127, 127, 255},
	color.RGBA{188, 189, 34, 255}, color.RGBA{23, 190, 207, 255},
}

func lines(name, title, xLabel, yLabel string, x []float64, series []Series) (*Figure, error) {
	p := newPlot(title)
	p.X.Label.Text, p.Y.Label.Text = xLabel, yLabel
	p.Add(plotter.NewGrid())
	var ys [][]float64
	var paths []plotter.XYs
	var names []string
	for i, s := range series {
		if len(x) == 0 || len(x) != len(s.Y) {
			return nil, fmt.Errorf("viz: %s: %d x values and %d y values%s; want the same number, at least one", name, len(x), len(s.Y), seriesName(s))
		}
		xy := make(plotter.XYs, len(x))
		for j := range x {
			xy[j] = plotter.XY{X: x[j], Y: s.Y[j]}
		}
		if err := checkSpan(name, x, s.Y); err != nil {
			return nil, err
		}
		ys = append(ys, s.Y)
		paths = append(paths, xy)
		line, points, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil, fmt.Errorf("viz: %s%s: %w", name, seriesName(s), err)
		}
		line.Color, line.Width = lineColors[i], 1.5
		points.Color = lineColors[i]
		p.Add(line, points)
		if s.Name != "" {
			p.Legend.Add(s.Name, line, points)
			names = append(names, s.Name)
		}
	}
	if lo, hi := finiteRange(ys); lo < 0 && hi > 0 {
		zero := plotter.NewFunction(func(float64) float64 { return 0 })
		zero.Color, zero.Width, zero.Dashes = color.Gray{150}, 1, []vg.Length{3, 3}
		p.Add(zero)
	}
	if wholeNumbers(x) {
		p.X.Tick.Marker = integerTicks{}
	}
	// newPlot's round ticks label 0 where the dashed line marks it.
	p.Legend.Padding = 2
	return newFigure(title, 480, 320, legendInCorner(p, names, paths)), nil
}

// legendInCorner draws p with its legend (of entries names) in whichever
// corner of the plotting area, set in from the axes, covers the least of
// the lines through paths: top left, where gonum put it on the y axis's
// line, unless the lines pass there.
func legendInCorner(p *plot.Plot, names []string, paths []plotter.XYs) func(draw.Canvas) {
	return func(c draw.Canvas) {
		if len(names) > 0 {
			placeLegend(p, c, names, paths)
		}
		p.Draw(c)
	}
}

// legendInset is the gap between a legend and the axes or the plot's edge.
const legendInset = 10

func placeLegend(p *plot.Plot, c draw.Canvas, names []string, paths []plotter.XYs) {
	dc := p.DataCanvas(c)
	tx, ty := p.Transforms(&dc)
	// The area gonum places the legend in: the data canvas before padding.
	area := dc.Rectangle
	area.Min.X, area.Max.X = area.Min.X-p.X.Padding, area.Max.X+p.X.Padding
	area.Min.Y, area.Max.Y = area.Min.Y-p.Y.Padding, area.Max.Y+p.Y.Padding
	sty := p.Legend.TextStyle
	var w, h vg.Length
	for i, n := range names {
		w = max(w, p.Legend.ThumbnailWidth+sty.Width(" "+n))
		h += sty.Height(n)
		if i > 0 {
			h += p.Legend.Padding
		}
	}
	best := -1
	for _, corner := range []struct{ top, left bool }{{true, true}, {true, false}, {false, false}, {false, true}} {
		xo, yo := vg.Length(legendInset), vg.Length(-legendInset)
		box := vg.Rectangle{Min: vg.Point{X: area.Min.X + xo}, Max: vg.Point{Y: area.Max.Y + yo}}
		if !corner.left {
			xo = -legendInset
			box.Min.X = area.Max.X - w + xo
		}
		if !corner.top {
			yo = legendInset
			box.Max.Y = area.Min.Y + h + yo
		}
		box.Max.X, box.Min.Y = box.Min.X+w, box.Max.Y-h
		covered := 0
		for _, path := range paths {
			for i := range path {
				prev := path[max(i-1, 0)]
				for k := range 16 {
					f := float64(k) / 16
					x, y := tx(prev.X+f*(path[i].X-prev.X)), ty(prev.Y+f*(path[i].Y-prev.Y))
					if x >= box.Min.X-3 && x <= box.Max.X+3 && y >= box.Min.Y-3 && y <= box.Max.Y+3 {
						covered++
					}
				}
			}
		}
		if best < 0 || covered < best {
			best = covered
			p.Legend.Top, p.Legend.Left, p.Legend.XOffs, p.Legend.YOffs = corner.top, corner.left, xo, yo
		}
	}
}

// wholeNumbers reports whether every x is a whole number (layers,
// positions, heads).
func wholeNumbers(x []float64) bool {
	for _, v := range x {
		if v != math.Trunc(v) || math.Abs(v) > 1<<40 { // NaN and Inf fail the first
			return false
		}
	}
	return true
}

// integerTicks ticks an axis of whole numbers at whole numbers only: each
// one labelled up to maxIntegerLabels of them, else every 2nd, 5th, 10th,
// 20th, ... with minor ticks between (where gonum's ticker labelled
// layers 0, 5, 10 and put minor ticks at 0.2, 0.4, ... between layers).
type integerTicks struct{}

const maxIntegerLabels = 12

func (integerTicks) Ticks(lo, hi float64) []plot.Tick {
	first, last := math.Ceil(lo), math.Floor(hi)
	if first > last {
		return nil
	}
	step := 1.0
	for k := 0; (last-first)/step+1 > maxIntegerLabels; k++ {
		step = []float64{2, 5, 10}[k%3] * math.Pow(10, float64(k/3))
	}
	minor := step
	switch {
	case step >= 5 && math.Mod(step, 5) == 0:
		minor = step / 5
	case step >= 2:
		minor = step / 2
	}
	var ticks []plot.Tick
	for v := math.Ceil(first/minor) * minor; v <= last; v += minor {
		t := plot.Tick{Value: v}
		if math.Mod(v, step) == 0 {
			if v == 0 {
				v = 0 // not -0, which would print as "-0"
			}
			t.Label = strconv.FormatFloat(v, 'f', -1, 64)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

func seriesName(s Series) string {
	if s.Name == "" {
		return ""
	}
	return fmt.Sprintf(" (series %q)", s.Name)
}
