package viz

import (
	"fmt"
	"image/color"
	"math"
	"slices"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Bars draws one horizontal bar per label, the first at the top, positive
// values red and negative blue: a direct logit attribution, one bar per
// component, reads as which parts push the answer up and which down.
// Positive bars are red and negative blue, as on every diverging scale.
func Bars(labels []string, values []float64, title, valueLabel string) (*Figure, error) {
	if len(labels) == 0 || len(labels) != len(values) {
		return nil, fmt.Errorf("viz: Bars: %d labels and %d values; want the same number, at least one", len(labels), len(values))
	}
	n := len(values)
	pos, neg := make(plotter.Values, n), make(plotter.Values, n)
	for i, v := range values {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("viz: Bars: %s is %g", labels[i], v)
		}
		// Row n-1-i: the plot's y axis counts from the bottom.
		if v >= 0 {
			pos[n-1-i] = v
		} else {
			neg[n-1-i] = v
		}
	}
	p := newPlot(title)
	p.X.Label.Text = valueLabel
	const barH = 16
	for k, vs := range []plotter.Values{pos, neg} {
		b, err := plotter.NewBarChart(vs, vg.Points(barH*0.7))
		if err != nil {
			return nil, fmt.Errorf("viz: Bars: %w", err)
		}
		b.Horizontal, b.Color, b.LineStyle.Width = true, []color.Color{deepRed, deepBlue}[k], 0
		p.Add(b)
	}
	p.Add(plotter.NewGrid())
	// Room beyond the longest bars, so that none ends at the frame.
	lo, hi := math.Min(0, slices.Min(values)), math.Max(0, slices.Max(values))
	pad := 0.05 * math.Max(hi-lo, 1e-9)
	p.X.Min, p.X.Max = lo-pad, hi+pad
	p.Y.Tick.Marker = nominal(labels, true, barH, labelGap)
	height := vg.Length(60 + barH*n)
	return newFigure(title, 480, height, p.Draw), nil
}
