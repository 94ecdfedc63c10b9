package viz

import (
	"fmt"

	"gonum.org/v1/plot/plotter"
)

// XY draws y against x as a line with points, axes labelled: a metric over
// a sweep (steering strength, a layer, a position).
func XY(title, xLabel, yLabel string, x, y []float64) (*Figure, error) {
	if len(x) == 0 || len(x) != len(y) {
		return nil, fmt.Errorf("viz: XY: %d x values and %d y values; want the same number, at least one", len(x), len(y))
	}
	xy := make(plotter.XYs, len(x))
	for i := range x {
		xy[i] = plotter.XY{X: x[i], Y: y[i]}
	}
	line, points, err := plotter.NewLinePoints(xy)
	if err != nil {
		return nil, fmt.Errorf("viz: XY: %w", err)
	}
	line.Color, line.Width = seriesColors[0], 1.5
	points.Color = seriesColors[0]
	p := newPlot(title)
	p.X.Label.Text, p.Y.Label.Text = xLabel, yLabel
	p.Add(plotter.NewGrid(), line, points)
	return newFigure(title, 480, 320, p.Draw), nil
}
