package viz

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot/vg"

	"github.com/stratalab/strata/trace"
)

// LogitLens draws the logit lens (tr.Lens): by layer and position, the
// probability of the top next-token prediction, each cell annotated with
// that token at minText (cut to the cell's width, two letters at least).
// Positions run across while their cells are wide enough for that; a
// longer prompt turns the figure, positions down and layers across, so 64
// tokens still name their predictions; past that (more positions than fit
// down the page, or too many layers across) the cells go unnamed and the
// title says so.
func LogitLens(tr *trace.Trace) (*Figure, error) {
	if tr == nil {
		return nil, nilTrace("LogitLens")
	}
	const name = "LogitLens"
	if err := checkTokens(tr, name); err != nil {
		return nil, err
	}
	lens := tr.Lens
	if lens == nil {
		return nil, missing(name, "the logit lens", "capture every layer's resid_post (blocks.*.hook_resid_post, no --layers range) and compute it before drawing: strata trace does when the trace has them; nb: m.Lens(tr); gpu: Engine.LogitLens")
	}
	t := len(tr.Tokens)
	if len(lens.Prob) == 0 || len(lens.Piece) != len(lens.Prob) {
		return nil, fmt.Errorf("viz: %s: the logit lens has %d probability rows and %d piece rows, want one per layer", name, len(lens.Prob), len(lens.Piece))
	}
	layers := len(lens.Prob)
	positions := positionLabels(tr.Pieces, tr.Pos0, tr.Pos0, t)
	// layersUp: [layer][position], layers stacked upward; its transpose
	// [position][layer] reads top down.
	layersUp := grid{cols: positions, xName: "position (input token)", yName: "layer", rowsUp: true}
	across := grid{rows: positions, xName: "layer", yName: "position (input token)"}
	texts := make([][]string, layers)
	for l, row := range lens.Prob {
		if len(row) != t || len(lens.Piece[l]) != t {
			return nil, fmt.Errorf("viz: %s: logit lens layer %d has %d probabilities and %d pieces, want %d (one per token)", name, l, len(row), len(lens.Piece[l]), t)
		}
		z := make([]float64, t)
		for i, v := range row {
			z[i] = float64(v)
		}
		layersUp.z, layersUp.rows = append(layersUp.z, z), append(layersUp.rows, layerName(l))
		across.cols = append(across.cols, layerName(l))
		texts[l] = slices.Clone(lens.Piece[l]) // cut below; the trace keeps its own
	}
	for i := range t {
		row := make([]float64, layers)
		for l := range layers {
			row[l] = layersUp.z[l][i]
		}
		across.z = append(across.z, row)
	}
	sc := sequential(0, 1)
	title := "Logit lens: top next-token prediction and its probability"
	const rowH = 18
	nameable := measured(minText).Width("·ab…") + 2 // a cut name's two letters
	g, cellW, cellH, extra := layersUp, cellSize(t, 1600, 10, 46, maxWidth-barWidth-90), vg.Length(rowH), vg.Length(barWidth+90)
	if cellW < nameable {
		ext := labelMargin(positions) + barWidth + 30
		g, cellW, cellH, extra = across, cellSize(layers, 360, 10, 72, maxWidth-ext), min(rowH, maxSpan/vg.Length(t)), ext
		texts = transpose(texts)
	}
	named := cellW >= nameable && cellH >= labelGap
	if !named {
		title += " (too many positions to name the tokens: tr.Lens has them)"
	}
	p := heatPlot(title, g, sc, cellW, cellH)
	if named {
		for _, row := range texts {
			for i, piece := range row {
				row[i] = cellText(piece, minText, cellW-2)
			}
		}
		if err := annotate(p, g, sc, texts, minText); err != nil {
			return nil, fmt.Errorf("viz: %s: %w", name, err)
		}
	}
	return newFigure(title, vg.Length(len(g.cols))*cellW+extra, vg.Length(len(g.rows))*cellH+xLabelRoom(g.cols, cellW)+60, withBar(p, barPlot(sc, "probability"))), nil
}

// transpose is s with rows and columns swapped, in new slices.
func transpose(s [][]string) [][]string {
	out := make([][]string, len(s[0]))
	for i := range out {
		out[i] = make([]string, len(s))
		for j := range s {
			out[i][j] = s[j][i]
		}
	}
	return out
}

// cellNumbers writes every value of z with one number of decimals, the
// same in every cell so the numbers compare at a glance: enough for two
// significant digits of the largest |value| (0.41: "%.2f"; 24.3: "24",
// 168: "168"), or one fewer where those do not fit width at 7 points. A
// value that rounds to zero at that precision prints as "0": "-0.00" read
// as a sign and "0.00" as clutter. Cell by cell, two significant digits
// had put "0.2" beside "0.19" and "0.0037" beside "0.98". nil when neither
// fits every cell: a number is never cut ("-0.0…" reads as 0).
func cellNumbers(z [][]float64, width vg.Length) [][]string {
	sty := measured(minText)
	decimals := 0
	if top := maxAbs(z); top > 0 {
		top, _ = strconv.ParseFloat(strconv.FormatFloat(top, 'g', 2, 64), 64) // 0.996 is 1.0
		decimals = max(0, 1-int(math.Floor(math.Log10(top))))
	}
	for d := decimals; d >= max(0, decimals-1); d-- {
		texts, fits := make([][]string, len(z)), true
		for r, row := range z {
			for _, v := range row {
				s := fixed(v, d)
				fits = fits && sty.Width(s) <= width
				texts[r] = append(texts[r], s)
			}
		}
		if fits {
			return texts
		}
	}
	return nil
}

// cellText fits a predicted token into width at size points, its leading
// space a middle dot as on the axes (" i" and "i" are different
// predictions), cut with an ellipsis where it is wider. A cut keeps two
// letters after the dot where they fit, else drops the dot for them.
func cellText(piece string, size, width vg.Length) string {
	sty := measured(size)
	s := []rune(label(piece))
	if sty.Width(string(s)) <= width {
		return string(s)
	}
	fits := func(s []rune) bool { return sty.Width(string(s)+"…") <= width }
	dots := len(s) - len([]rune(strings.TrimLeft(string(s), "·")))
	if dots == len(s) {
		dots = 0 // spaces only: the dots are the name
	}
	for len(s) > dots+2 && !fits(s) {
		s = s[:len(s)-1]
	}
	if !fits(s) {
		s = s[dots:]
	}
	for len(s) > 1 && !fits(s) {
		s = s[:len(s)-1]
	}
	return string(s) + "…"
}

// headsIn is how many heads a layer has in LayerHeadLabels rows: the
// number of rows of layer 0.
func headsIn(rows []string) int {
	n := 0
	for n < len(rows) && strings.HasPrefix(rows[n], "L0H") {
		n++
	}
	return max(n, 1)
}

// resultScale is centred on 0, or runs from 0 when no value is below it:
// white then means nothing in both.
func resultScale(z [][]float64) scale {
	if lo, hi := finiteRange(z); lo >= 0 && hi > 0 {
		return sequential(0, hi)
	}
	return diverging(maxAbs(z))
}

// PatchingHeatmap draws an activation-patching result: result[row][col],
// rows (usually layers) stacked upward from row 0, columns (usually
// positions) across, on a blue-white-red scale centred on zero (white to
// red from 0 when no value is negative), each cell with its value where
// cells have room. Rows labelled as LayerLabels are
// named "layer", and then columns "head" (HeadLabels) or "position". The
// colour bar is labelled barLabel (at most one: what the values are, in a
// few words), or "value".
func PatchingHeatmap(result [][]float64, rowLabels, colLabels []string, title string, barLabel ...string) (*Figure, error) {
	const name = "PatchingHeatmap"
	if len(result) == 0 || len(result[0]) == 0 {
		return nil, fmt.Errorf("viz: %s: the result is empty", name)
	}
	if len(barLabel) > 1 {
		return nil, fmt.Errorf("viz: %s: %d colour bar labels; at most one", name, len(barLabel))
	}
	valueName := "value"
	if len(barLabel) == 1 {
		valueName = barLabel[0]
	}
	cols := len(result[0])
	for r, row := range result {
		if len(row) != cols {
			return nil, fmt.Errorf("viz: %s: row %d has %d values, row 0 has %d", name, r, len(row), cols)
		}
	}
	if len(rowLabels) != len(result) || len(colLabels) != cols {
		return nil, fmt.Errorf("viz: %s: %d row and %d column labels for a %d×%d result", name, len(rowLabels), len(colLabels), len(result), cols)
	}
	g := grid{z: result, cols: make([]string, cols), rows: make([]string, len(rowLabels)), rowsUp: true}
	if slices.Equal(rowLabels, LayerLabels(len(rowLabels))) {
		g.yName, g.xName = "layer", "position"
		if slices.Equal(colLabels, HeadLabels(cols)) {
			g.xName = "head"
		}
	} else if h := headsIn(rowLabels); len(rowLabels)%h == 0 && slices.Equal(rowLabels, LayerHeadLabels(len(rowLabels)/h, h)) {
		g.yName, g.xName = "layer and head", "position"
	}
	for i, s := range colLabels {
		g.cols[i] = label(s)
	}
	for i, s := range rowLabels {
		g.rows[i] = label(s)
	}
	sc := resultScale(result)
	extra := labelMargin(g.rows) + barWidth + 30
	cellW := cellSize(cols, 520, 5, 32, maxWidth-extra)
	cellH := rowHeight(cellW, len(result))
	p := heatPlot(title, g, sc, cellW, cellH)
	if texts := cellNumbers(result, cellW-2); cellH >= 12 && texts != nil {
		if err := annotate(p, g, sc, texts, minText); err != nil {
			return nil, fmt.Errorf("viz: %s: %w", name, err)
		}
	}
	return newFigure(title, vg.Length(cols)*cellW+extra, vg.Length(len(result))*cellH+xLabelRoom(g.cols, cellW)+60, withBar(p, barPlot(sc, valueName))), nil
}
