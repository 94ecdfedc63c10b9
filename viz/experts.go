package viz

import (
	"fmt"
	"slices"

	"gonum.org/v1/plot/vg"

	"github.com/stratalab/strata/trace"
)

// ExpertUsage draws a mixture's routing: layers down, experts across, each
// cell the share of the prompt's tokens routed to that expert (from the
// captured blocks.*.mlp.hook_expert_ids). A balanced router gives every
// cell about k/experts.
func ExpertUsage(tr *trace.Trace) (*Figure, error) {
	if tr == nil {
		return nil, nilTrace("ExpertUsage")
	}
	const name = "ExpertUsage"
	if err := checkTokens(tr, name); err != nil {
		return nil, err
	}
	if tr.Model.Experts == 0 {
		return nil, fmt.Errorf("viz: %s: %s has no experts", name, tr.Model.Name)
	}
	layers, err := layersWith(tr, name, "mlp.hook_expert_ids")
	if err != nil {
		return nil, err
	}
	g := grid{cols: make([]string, tr.Model.Experts), xName: "expert", yName: "layer", rowsUp: true}
	for e := range g.cols {
		g.cols[e] = fmt.Sprint(e)
	}
	for _, l := range layers {
		counts, err := tr.ExpertUsage(l)
		if err != nil {
			return nil, fmt.Errorf("viz: %s: %w", name, err)
		}
		row := make([]float64, len(counts))
		for e, n := range counts {
			row[e] = float64(n) / float64(len(tr.Tokens))
		}
		g.z = append(g.z, row)
		g.rows = append(g.rows, fmt.Sprintf("L%d", l))
	}
	hi := 0.0
	for _, row := range g.z {
		hi = max(hi, slices.Max(row))
	}
	sc := sequential(0, max(hi, 1e-9))
	title := fmt.Sprintf("Expert usage: the share of the %d tokens each expert takes, by layer", len(tr.Tokens))
	extra := labelMargin(g.rows) + barWidth + 30
	cellW := cellSize(len(g.cols), 520, 5, 32, maxWidth-extra)
	cellH := rowHeight(cellW, len(g.z))
	return newFigure(title, vg.Length(len(g.cols))*cellW+extra, vg.Length(len(g.z))*cellH+xLabelRoom(g.cols, cellW)+60,
		withBar(heatPlot(title, g, sc, cellW, cellH), barPlot(sc, "share of tokens"))), nil
}
