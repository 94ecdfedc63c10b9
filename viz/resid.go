package viz

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/stat"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/stratalab/strata/trace"
)

// ResidNorms draws the residual stream's L2 norm at each layer's output
// (hook_resid_post) and position, with the embedding below when captured.
// Where the sequence's first position outgrows every other by more than
// twice (the first token's stream, an attention sink, often does), the
// colours span the other positions and the title gives the first one's
// largest norm, drawn in the deepest colour: on its scale the rest were
// all pale.
func ResidNorms(tr *trace.Trace) (*Figure, error) {
	if tr == nil {
		return nil, nilTrace("ResidNorms")
	}
	const name = "ResidNorms"
	if err := checkTokens(tr, name); err != nil {
		return nil, err
	}
	points, stages, err := residStages(tr, name)
	if err != nil {
		return nil, err
	}
	t, d := len(tr.Tokens), tr.Model.DModel
	g := grid{cols: positionLabels(tr.Pieces, tr.Pos0, tr.Pos0, t), xName: "position", yName: "residual stream after", rowsUp: true, rows: stages}
	for _, p := range points {
		n, err := rowNorms(tr, name, p, t, d)
		if err != nil {
			return nil, err
		}
		g.z = append(g.z, n)
	}
	cellW := cellSize(t, 520, 5, 32, maxWidth-barWidth-110)
	cellH := rowHeight(cellW, len(g.rows))
	sc := sequential(finiteRange(g.z))
	title := "Residual stream L2 norm"
	if first, ok := outgrownFirst(tr, g.z); ok {
		rows := make([][]float64, len(g.z))
		for i, row := range g.z {
			rows[i] = row[1:]
		}
		sc = sequential(finiteRange(rows))
		title += fmt.Sprintf(" (position 0 reaches %.3g, past the scale)", first)
	}
	return newFigure(title, vg.Length(t)*cellW+barWidth+110, vg.Length(len(g.rows))*cellH+xLabelRoom(g.cols, cellW)+60, withBar(heatPlot(title, g, sc, cellW, cellH), barPlot(sc, "L2 norm"))), nil
}

// outgrownFirst reports whether norms ([stage][position], of a trace from
// the sequence's start) hold a first position whose largest norm, first,
// outgrows every other position's by more than twice: an attention sink,
// which ResidNorms and PCA set apart.
func outgrownFirst(tr *trace.Trace, norms [][]float64) (first float64, ok bool) {
	if tr.Pos0 != 0 || len(norms) == 0 || len(norms[0]) < 2 {
		return 0, false
	}
	first, rest := firstAndRest(norms)
	return first, rest > 0 && first > 2*rest
}

// firstAndRest is the largest finite value of z's first column and of the
// others.
func firstAndRest(z [][]float64) (first, rest float64) {
	first, rest = math.Inf(-1), math.Inf(-1)
	for _, row := range z {
		for i, v := range row {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			if i == 0 {
				first = max(first, v)
			} else {
				rest = max(rest, v)
			}
		}
	}
	return first, rest
}

// AttnMLPNorms draws, per layer, the mean over positions of the L2 norm of
// what attention (hook_attn_out) and the MLP (hook_mlp_out) add to the
// residual stream; either may be missing, not both.
func AttnMLPNorms(tr *trace.Trace) (*Figure, error) {
	if tr == nil {
		return nil, nilTrace("AttnMLPNorms")
	}
	const name = "AttnMLPNorms"
	if err := checkTokens(tr, name); err != nil {
		return nil, err
	}
	t, d := len(tr.Tokens), tr.Model.DModel
	title := "Mean L2 norm of each block's output"
	p := newPlot(title)
	p.X.Label.Text, p.Y.Label.Text = "layer", "mean L2 norm over positions"
	drawn := 0
	var names []string
	var paths []plotter.XYs
	for i, local := range []trace.Point{trace.AttnOut, trace.MLPOut} {
		layers, err := layersWith(tr, name, local)
		if err != nil {
			continue // the other series may be there
		}
		var xy plotter.XYs
		for _, l := range layers {
			n, err := rowNorms(tr, name, trace.LayerPoint(l, local), t, d)
			if err != nil {
				return nil, err
			}
			xy = append(xy, plotter.XY{X: float64(l), Y: stat.Mean(n, nil)})
		}
		line, points, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil, fmt.Errorf("viz: %s: %w", name, err)
		}
		line.Color, points.Color = seriesColors[i], seriesColors[i]
		line.Width = 2
		p.Add(line, points)
		names = append(names, map[trace.Point]string{trace.AttnOut: "attention out", trace.MLPOut: "MLP out"}[local])
		paths = append(paths, xy)
		p.Legend.Add(names[len(names)-1], line, points)
		drawn++
	}
	if drawn == 0 {
		return nil, missing(name, "blocks.*.hook_attn_out or blocks.*.hook_mlp_out",
			`capture "blocks.*.hook_attn_out" and "blocks.*.hook_mlp_out"`)
	}
	var ticks []string
	for l := range tr.Model.Layers {
		ticks = append(ticks, layerName(l))
	}
	p.X.Tick.Marker = nominal(ticks, false, 420/vg.Length(max(1, len(ticks))), 24)
	p.Y.Min = 0
	return newFigure(title, 480, 320, legendInCorner(p, names, paths)), nil
}

var seriesColors = []color.Color{color.RGBA{31, 119, 180, 255}, color.RGBA{214, 39, 40, 255}}

// KVCache draws one layer's cache for one KV head: K and V as positions ×
// head_dim heatmaps, and each position's K and V norms.
func KVCache(tr *trace.Trace, layer, kvHead int) (*Figure, error) {
	if tr == nil {
		return nil, nilTrace("KVCache")
	}
	const name = "KVCache"
	if err := checkTokens(tr, name); err != nil {
		return nil, err
	}
	if err := checkLayer(tr, name, layer); err != nil {
		return nil, err
	}
	if err := checkIndex(name, "KV head", kvHead, tr.Model.KVHeads); err != nil {
		return nil, err
	}
	m := tr.Model
	keys := tr.Pos0 + len(tr.Tokens)
	labels := positionLabels(tr.Pieces, tr.Pos0, 0, keys)
	var grids [2]grid
	var norms [2][]float64
	for i, local := range []trace.Point{trace.AttnCacheK, trace.AttnCacheV} {
		x, err := tensor(tr, name, trace.LayerPoint(layer, local), keys, m.KVHeads, m.HeadDim)
		if err != nil {
			return nil, err
		}
		g := grid{rows: labels, xName: "head_dim", yName: "position"}
		for p := range keys {
			off := (p*m.KVHeads + kvHead) * m.HeadDim
			row := make([]float64, m.HeadDim)
			for j := range row {
				row[j] = float64(x.Data[off+j])
			}
			g.z = append(g.z, row)
			norms[i] = append(norms[i], floats.Norm(row, 2))
		}
		for j := range m.HeadDim {
			g.cols = append(g.cols, fmt.Sprint(j))
		}
		grids[i] = g
	}
	cell := cellSize(keys, 360, 4, 18, maxSpan)
	extra := labelMargin(labels) + barWidth + 30
	dimCell := cellSize(m.HeadDim, 260, 2, 18, maxWidth/2-extra) // K and V side by side
	heatW := vg.Length(m.HeadDim)*dimCell + extra
	heatH := vg.Length(keys)*cell + 90
	// K's values are often ten times V's or more: each has its own colour
	// scale, the title says so, and the norms below compare the two.
	title := fmt.Sprintf("KV cache, layer %d KV head %d (K and V each on its own colour scale)", layer, kvHead)

	var panels [2]func(draw.Canvas)
	for i, what := range []string{"K (after RoPE)", "V"} {
		sc := diverging(maxAbs(grids[i].z))
		panels[i] = withBar(heatPlot(what, grids[i], sc, dimCell, cell), barPlot(sc, what[:1]))
	}
	np := newPlot("per-position norm")
	np.X.Label.Text, np.Y.Label.Text = "position", "L2 norm"
	names := []string{"K norm", "V norm"}
	var paths []plotter.XYs
	for i, what := range names {
		var xy plotter.XYs
		for p, v := range norms[i] {
			xy = append(xy, plotter.XY{X: float64(p), Y: v})
		}
		line, points, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil, fmt.Errorf("viz: %s: %w", name, err)
		}
		line.Color, points.Color = seriesColors[i], seriesColors[i]
		np.Add(line, points)
		np.Legend.Add(what, line, points)
		paths = append(paths, xy)
	}
	// Headroom for the legend, in the corner the lines cross least: at 1.2
	// times the largest norm it sat on the K line.
	np.Y.Min, np.Y.Max = 0, 1.45*max(floats.Max(norms[0]), floats.Max(norms[1]))
	normW := max(2*heatW, vg.Length(keys)*cellSize(keys, 700, 6, 24, maxWidth-100)+100)
	normCell := (normW - 100) / vg.Length(keys)
	if upright(labels, normCell) {
		np.X.Tick.Marker = nominal(labels, false, normCell, labelGap)
		np.X.Label.Text = withNote(np.X.Label.Text, everyNth(labelStep(normCell, labelGap), ""))
		np.X.Tick.Label.Rotation = math.Pi / 2
		np.X.Tick.Label.XAlign, np.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
	} else {
		np.X.Tick.Marker = nominal(labels, false, normCell, normCell)
	}
	normH := 200 + xLabelRoom(labels, normCell)

	return newFigure(title, normW, 30+heatH+normH, func(c draw.Canvas) {
		drawTitle(c, title)
		top := draw.Crop(c, 0, 0, normH, -30)
		half := (top.Max.X - top.Min.X) / 2
		panels[0](draw.Crop(top, 0, -half, 0, 0))
		panels[1](draw.Crop(top, half, 0, 0, 0))
		legendInCorner(np, names, paths)(draw.Crop(c, 0, 0, 0, -(30 + heatH)))
	}), nil
}
