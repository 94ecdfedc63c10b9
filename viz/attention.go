package viz

import (
	"errors"
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/stratalab/strata/trace"
)

// pattern returns layer's hook_pattern checked against the trace's shape.
func pattern(tr *trace.Trace, figure string, layer int) (*trace.Tensor, error) {
	t := len(tr.Tokens)
	return tensor(tr, figure, trace.LayerPoint(layer, "attn.hook_pattern"), tr.Model.Heads, t, tr.Pos0+t)
}

// headMatrix is one head's [query][key] slice of a pattern.
func headMatrix(p *trace.Tensor, head int) [][]float64 {
	t, keys := p.Shape[1], p.Shape[2]
	z := make([][]float64, t)
	for r := range z {
		z[r] = make([]float64, keys)
		for k := range z[r] {
			z[r][k] = float64(p.Data[(head*t+r)*keys+k])
		}
	}
	return z
}

// AttentionHead draws one head's attention pattern: queries down, keys
// across, each labelled by its token.
func AttentionHead(tr *trace.Trace, layer, head int) (*Figure, error) {
	if tr == nil {
		return nil, nilTrace("AttentionHead")
	}
	const name = "AttentionHead"
	if err := checkTokens(tr, name); err != nil {
		return nil, err
	}
	if err := checkLayer(tr, name, layer); err != nil {
		return nil, err
	}
	if err := checkIndex(name, "head", head, tr.Model.Heads); err != nil {
		return nil, err
	}
	p, err := pattern(tr, name, layer)
	if err != nil {
		return nil, err
	}
	t, keys := p.Shape[1], p.Shape[2]
	g := grid{
		z:     headMatrix(p, head),
		rows:  positionLabels(tr.Pieces, tr.Pos0, tr.Pos0, t),
		cols:  positionLabels(tr.Pieces, tr.Pos0, 0, keys),
		xName: "key", yName: "query",
	}
	extra := labelMargin(g.rows) + barWidth + 30
	cell := cellSize(max(t, keys), 440, 4, 24, maxWidth-extra)
	title := fmt.Sprintf("Attention pattern, layer %d head %d", layer, head)
	sc := sequential(0, 1)
	return newFigure(title, vg.Length(keys)*cell+extra, vg.Length(t)*cell+xLabelRoom(g.cols, cell)+60, withBar(heatPlot(title, g, sc, cell, cell), barPlot(sc, "attention"))), nil
}

// labelWidth is the width of the widest tick label.
func labelWidth(labels []string) vg.Length {
	sty := measured(tickText)
	w := vg.Length(0)
	for _, l := range labels {
		w = max(w, sty.Width(l))
	}
	return w
}

// labelMargin is the room beside an axis for its tick labels and name.
func labelMargin(labels []string) vg.Length { return labelWidth(labels) + 30 }

// AttentionGrid draws every captured layer's heads as small multiples,
// heads across and layers up, the first at the bottom, as every figure
// with an axis of layers stacks them (bertviz's model view runs down; side
// by side with the head scores, a row read across named another layer).
// Tiles of prompts longer than a tile has pixels show each block's
// largest weight.
func AttentionGrid(tr *trace.Trace) (*Figure, error) {
	if tr == nil {
		return nil, nilTrace("AttentionGrid")
	}
	const name = "AttentionGrid"
	if err := checkTokens(tr, name); err != nil {
		return nil, err
	}
	layers, err := layersWith(tr, name, "attn.hook_pattern")
	if err != nil {
		return nil, err
	}
	heads := tr.Model.Heads
	sc := sequential(0, 1)
	const gap, left, top, titleH = 4, 34, 18, 28
	tile := min(cellSize(max(heads, len(layers)), 900, 36, 110, maxSpan), (maxWidth-left-barWidth-16)/vg.Length(heads)-gap)
	px := int(2 * tile)
	tiles := make([][][][]float64, len(layers))
	for i, l := range layers {
		p, err := pattern(tr, name, l)
		if err != nil {
			return nil, err
		}
		for h := range heads {
			tiles[i] = append(tiles[i], maxPool(headMatrix(p, h), px))
		}
	}
	title := fmt.Sprintf("Attention patterns: %s × %s (rows: queries, columns: keys)", counted(len(layers), "layer"), counted(heads, "head"))
	width := left + vg.Length(heads)*(tile+gap) + barWidth + 16
	height := titleH + top + vg.Length(len(layers))*(tile+gap) + 12
	return newFigure(title, width, height, func(c draw.Canvas) {
		sty := text.Style{Color: color.Black, Font: font.From(sans, tickText), Handler: plot.DefaultTextHandler,
			XAlign: draw.XCenter, YAlign: draw.YCenter}
		drawTitle(c, title)
		y0 := c.Max.Y - titleH - top // top of the first row of tiles
		border := draw.LineStyle{Color: color.Gray{170}, Width: 0.5}
		for i, l := range layers {
			yTop := y0 - vg.Length(len(layers)-1-i)*(tile+gap)
			c.FillText(sty, vg.Point{X: c.Min.X + left/2, Y: yTop - tile/2}, layerName(l))
			for h := range heads {
				x := c.Min.X + left + vg.Length(h)*(tile+gap)
				if i == len(layers)-1 {
					c.FillText(sty, vg.Point{X: x + tile/2, Y: y0 + top/2}, fmt.Sprintf("H%d", h))
				}
				r := vg.Rectangle{Min: vg.Point{X: x, Y: yTop - tile}, Max: vg.Point{X: x + tile, Y: yTop}}
				c.DrawImage(r, raster(tiles[i][h], sc, px))
				c.StrokeLines(border, []vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}, r.Min})
			}
		}
		bar := c
		bar.Min.X = c.Min.X + left + vg.Length(heads)*(tile+gap) + 6
		bar.Max.X = bar.Min.X + barWidth - 8
		bar.Max.Y = y0
		bar.Min.Y = y0 - vg.Length(len(layers))*(tile+gap) + gap
		barPlot(sc, "attention").Draw(bar)
	}), nil
}

// PrevTokenScores draws each head's previous-token score (see
// trace.PrevTokenScores) by layer and head.
func PrevTokenScores(tr *trace.Trace) (*Figure, error) {
	if tr == nil {
		return nil, nilTrace("PrevTokenScores")
	}
	return headScores(tr, "PrevTokenScores", "Previous-token score by head", trace.PrevTokenScores)
}

// InductionScores draws each head's induction score (see
// trace.InductionScores) by layer and head, for a prompt that ends with two
// copies of a period-token sequence; period 0 finds it (trace.RepeatPeriod).
func InductionScores(tr *trace.Trace, period int) (*Figure, error) {
	if tr == nil {
		return nil, nilTrace("InductionScores")
	}
	if tr != nil && period == 0 {
		if period = trace.RepeatPeriod(tr.Tokens); period == 0 {
			if tr.Pos0 > 0 { // the copies may be in an earlier prefill, out of sight
				return nil, errors.New("viz: InductionScores: this prefill's tokens do not end in two copies of a sequence; it continues an earlier one, so give the period")
			}
			return nil, errors.New("viz: InductionScores: the prompt does not end in two copies of a sequence (nb.RepeatedRandom makes one), so an induction head has nothing to look back to")
		}
	}
	if tr != nil && tr.Pos0 == 0 && period > 0 && !endsInTwoCopies(tr.Tokens, period) {
		return nil, fmt.Errorf("viz: InductionScores: the prompt does not end in two copies of a sequence of %d tokens (nb.RepeatedRandom makes one), so an induction head has nothing to look back to", period)
	}
	return headScores(tr, "InductionScores", fmt.Sprintf("Induction score by head (period %d)", period),
		func(p *trace.Tensor) ([]float64, error) { return trace.InductionScores(p, period) })
}

// endsInTwoCopies says whether the last period tokens repeat the period
// before them.
func endsInTwoCopies(tokens []int32, period int) bool {
	n := len(tokens)
	if 2*period > n {
		return true // too short: the scores' own check says so
	}
	for i := n - period; i < n; i++ {
		if tokens[i] != tokens[i-period] {
			return false
		}
	}
	return true
}

func headScores(tr *trace.Trace, name, title string, score func(*trace.Tensor) ([]float64, error)) (*Figure, error) {
	if err := checkTokens(tr, name); err != nil {
		return nil, err
	}
	layers, err := layersWith(tr, name, "attn.hook_pattern")
	if err != nil {
		return nil, err
	}
	g := grid{xName: "head", yName: "layer", rowsUp: true}
	for _, l := range layers {
		p, err := pattern(tr, name, l)
		if err != nil {
			return nil, err
		}
		s, err := score(p)
		if err != nil {
			return nil, fmt.Errorf("viz: %s: layer %d: %w", name, l, err)
		}
		g.z = append(g.z, s)
		g.rows = append(g.rows, layerName(l))
	}
	for h := range tr.Model.Heads {
		g.cols = append(g.cols, fmt.Sprintf("H%d", h))
	}
	cellW, cellH := cellSize(len(g.cols), 480, 10, 44, maxWidth-barWidth-90), cellSize(len(g.rows), 480, 10, 44, maxSpan)
	sc := sequential(0, 1)
	p := heatPlot(title, g, sc, cellW, cellH)
	if cellW >= 24 && cellH >= 10 { // room for two decimals in each cell
		texts := make([][]string, len(g.z))
		for r, row := range g.z {
			for _, v := range row {
				texts[r] = append(texts[r], fmt.Sprintf("%.2f", v))
			}
		}
		if err := annotate(p, g, sc, texts, minText); err != nil {
			return nil, fmt.Errorf("viz: %s: %w", name, err)
		}
	}
	return newFigure(title, vg.Length(len(g.cols))*cellW+barWidth+90, vg.Length(len(g.rows))*cellH+100, withBar(p, barPlot(sc, "score"))), nil
}

// maxPool shrinks z to at most n rows and columns, each cell the largest
// value of the block it covers, so that a thumbnail still shows where
// attention is sharp.
func maxPool(z [][]float64, n int) [][]float64 {
	rows, cols := len(z), len(z[0])
	b := (max(rows, cols) + n - 1) / n
	if b <= 1 {
		return z
	}
	out := make([][]float64, (rows+b-1)/b)
	for r := range out {
		out[r] = make([]float64, (cols+b-1)/b)
		for c := range out[r] {
			m := math.Inf(-1)
			for i := r * b; i < min((r+1)*b, rows); i++ {
				for j := c * b; j < min((c+1)*b, cols); j++ {
					m = max(m, z[i][j])
				}
			}
			out[r][c] = m
		}
	}
	return out
}

// counted is "1 layer", "2 layers": a count and its noun.
func counted(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// headTiles draws a layer's captured attention pattern or scores ([heads,
// queries, keys]) as a tile per head, queries down and keys across, on one
// colour scale. The first tile of each row of tiles names the query tokens
// (the last row's tiles the key tokens), as AttentionGrid's tiles do not:
// every one where rows (columns) have room, else every 2nd, 3rd, ..., as
// the title then says.
func headTiles(title string, x *trace.Tensor, queries, keys []string, isPattern bool) (*Figure, error) {
	heads, t, k := x.Shape[0], x.Shape[1], x.Shape[2]
	if heads == 0 || t == 0 || k == 0 {
		return nil, fmt.Errorf("viz: Captured: %s has no entries to draw", title)
	}
	sc, valueName := sequential(0, 1), "attention"
	if !isPattern {
		lo, hi := math.Inf(1), math.Inf(-1)
		masked := false
		for _, v := range x.Data {
			if f := float64(v); !math.IsNaN(f) && !math.IsInf(f, 0) {
				lo, hi = min(lo, f), max(hi, f)
			} else {
				masked = masked || math.IsInf(f, -1)
			}
		}
		if masked {
			title += "; grey: masked (−∞)"
		}
		if lo > hi { // nothing finite
			lo, hi = 0, 1
		}
		sc, valueName = scaleFor([][]float64{{lo, hi}}), "score"
	}
	across := min(heads, 4)
	if heads > 16 {
		across = 8
	}
	down := (heads + across - 1) / across
	const gap, labelH, titleH, minCell, minBar = 8, 14, 28, 9, 120 // minCell: a tick label's height
	left := labelWidth(queries) + 8
	span := (maxWidth-left-barWidth-16)/vg.Length(across) - gap
	cellW := span / vg.Length(max(t, k))
	cellH := max(cellW, min(minCell, span/vg.Length(t))) // rows of a continued prefill's few queries stay visible
	qStep, kStep := labelStep(cellH, minCell), labelStep(cellW, minCell)
	note := everyNth(max(qStep, kStep), "token ")
	switch {
	case qStep == 1 && kStep > 1:
		note = everyNth(kStep, "key ")
	case kStep == 1 && qStep > 1:
		note = everyNth(qStep, "query ")
	}
	if note != "" {
		title += " (" + note + ")"
	}
	tileW, tileH := cellW*vg.Length(k), cellH*vg.Length(t)
	bottom := labelWidth(keys) + 8
	px := int(2 * max(tileW, tileH))
	tiles := make([][][]float64, heads) // pooled: the figure keeps these, not the capture
	for h := range tiles {
		tiles[h] = maxPool(headMatrix(x, h), px)
	}
	width := left + vg.Length(across)*(tileW+gap) + barWidth + 16
	rowsH := vg.Length(down) * (tileH + labelH + gap)
	height := titleH + max(rowsH, labelH+minBar) + bottom
	return newFigure(title, width, height, func(c draw.Canvas) {
		drawTitle(c, title)
		head := text.Style{Color: color.Black, Font: font.From(sans, tickText), Handler: plot.DefaultTextHandler,
			XAlign: draw.XCenter, YAlign: draw.YCenter}
		query := text.Style{Color: color.Black, Font: font.From(sans, tickText), Handler: plot.DefaultTextHandler,
			XAlign: draw.XRight, YAlign: draw.YCenter}
		key := query
		key.Rotation = math.Pi / 2 // read upwards, ending under its column
		top := c.Max.Y - titleH
		border := draw.LineStyle{Color: color.Gray{170}, Width: 0.5}
		for h, z := range tiles {
			x0 := c.Min.X + left + vg.Length(h%across)*(tileW+gap)
			y1 := top - vg.Length(h/across)*(tileH+labelH+gap) - labelH
			c.FillText(head, vg.Point{X: x0 + tileW/2, Y: y1 + labelH/2}, fmt.Sprintf("H%d", h))
			r := vg.Rectangle{Min: vg.Point{X: x0, Y: y1 - tileH}, Max: vg.Point{X: x0 + tileW, Y: y1}}
			c.DrawImage(r, raster(z, sc, px))
			c.StrokeLines(border, []vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}, r.Min})
			if h%across == 0 {
				for q := 0; q < len(queries); q += qStep {
					c.FillText(query, vg.Point{X: x0 - 4, Y: y1 - (vg.Length(q)+0.5)*cellH}, queries[q])
				}
			}
			if h+across >= heads { // nothing below it
				for j := 0; j < len(keys); j += kStep {
					c.FillText(key, vg.Point{X: x0 + (vg.Length(j)+0.5)*cellW, Y: y1 - tileH - 4}, keys[j])
				}
			}
		}
		bar := c
		bar.Min.X = c.Min.X + left + vg.Length(across)*(tileW+gap) + 6
		bar.Max.X = bar.Min.X + barWidth - 8
		bar.Max.Y = top - labelH
		bar.Min.Y = bar.Max.Y - min(max(rowsH-labelH-gap, minBar), 2*span)
		barPlot(sc, valueName).Draw(bar)
	}), nil
}
