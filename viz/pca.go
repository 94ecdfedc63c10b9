package viz

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/stratalab/strata/trace"
)

// PCA draws the hidden states of every captured layer (hook_resid_post,
// and hook_embed when captured) in a panel each, on that layer's own
// first two principal components, each point labelled by its token where
// the label has room. One projection for all layers had squeezed the
// embedding, whose states are far smaller, into one blob, and drawn four
// layers' points on top of one another. A deep model's panels are thinned
// to at most maxPCAPanels layers, evenly spaced, first and last kept, as
// the title says.
// A position whose norm at some layer is over twice that layer's median
// (an attention sink: the first token, and often the next) is left out,
// as the title says: such states took the first component to themselves
// and squeezed the other positions into a corner.
func PCA(tr *trace.Trace) (*Figure, error) {
	if tr == nil {
		return nil, nilTrace("PCA")
	}
	const name = "PCA"
	if err := checkTokens(tr, name); err != nil {
		return nil, err
	}
	names, stages, err := residStages(tr, name)
	if err != nil {
		return nil, err
	}
	t, d := len(tr.Tokens), tr.Model.DModel
	if t < 3 || d < 2 {
		return nil, fmt.Errorf("viz: %s: %d positions of width %d are too few for two principal components (want 3 positions or more)", name, t, d)
	}
	xs := make([][]float32, len(names))
	for s, n := range names {
		x, err := tensor(tr, name, n, t, d)
		if err != nil {
			return nil, err
		}
		xs[s] = x.Data
	}
	title := "Each layer's states on its first two principal components"
	kept, out, top := sinkPositions(stateNorms(xs, t, d))
	if len(out) > 0 && len(kept) >= 3 {
		its := "norm to %.3g, over 2× its layer's median"
		if len(out) > 1 {
			its = "norms to %.3g, over 2× their layer's median"
		}
		// A line of its own: on one line the title outgrew maxWidth.
		title += fmt.Sprintf("\n(%s left out: "+its+")", positionList(out, tr.Pos0), top)
	} else {
		kept = kept[:0]
		for i := range t {
			kept = append(kept, i)
		}
	}
	shown := panelStages(len(names))
	if len(shown) < len(names) {
		title += fmt.Sprintf("\n(%d of %d layers)", len(shown), len(names))
	}
	var labels []string
	for _, i := range kept {
		labels = append(labels, label(pieceAt(tr, i)))
	}
	var panels []*plot.Plot
	for _, s := range shown {
		p, err := pcaPanel(stages[s], xs[s], kept, d, labels, stageColor(s, len(names)))
		if err != nil {
			return nil, err
		}
		panels = append(panels, p)
	}
	cols := min(len(panels), 2) // two columns of 360 points: maxWidth
	tiles := draw.Tiles{Rows: (len(panels) + cols - 1) / cols, Cols: cols, PadX: 12, PadY: 12}
	const panelW, panelH = maxWidth / 2, 280
	titleH := measured(12).Height(title) + 10
	return newFigure(title, vg.Length(cols*panelW), titleH+vg.Length(tiles.Rows*panelH), func(c draw.Canvas) {
		drawTitle(c, title)
		c = draw.Crop(c, 0, 0, 0, -titleH)
		for i, p := range panels {
			p.Draw(tiles.At(c, i%cols, i/cols))
		}
	}), nil
}

// maxPCAPanels is the most layers PCA draws: four rows of two panels.
const maxPCAPanels = 8

// panelStages picks the stages PCA draws of n: all of them up to
// maxPCAPanels, else that many evenly spaced, the first and last kept.
func panelStages(n int) []int {
	k := min(n, maxPCAPanels)
	out := make([]int, k)
	for i := range k {
		out[i] = i
		if k < n {
			out[i] = int(math.Round(float64(i) * float64(n-1) / float64(k-1)))
		}
	}
	return out
}

// pcaPanel projects one stage's states x (positions of width d, those in
// kept) on their first two principal components, centred on their mean.
func pcaPanel(stage string, x []float32, kept []int, d int, labels []string, c color.Color) (*plot.Plot, error) {
	n := len(kept)
	row := func(k int) []float32 { i := kept[k]; return x[i*d : (i+1)*d] }
	dirs, vars, total, mean := principal(row, n, d, 2)
	if len(dirs) < 2 {
		return nil, fmt.Errorf("viz: PCA: the principal component analysis of %s's %d hidden states did not converge", stage, n)
	}
	pts := make(plotter.XYs, n)
	for k := range n {
		for j, v := range row(k) {
			pts[k].X += (float64(v) - mean[j]) * dirs[0][j]
			pts[k].Y += (float64(v) - mean[j]) * dirs[1][j]
		}
	}
	p := newPlot(stage)
	share := func(v float64) float64 {
		if total > 0 {
			return 100 * v / total
		}
		return 0
	}
	p.X.Label.Text = fmt.Sprintf("PC1 (%.0f%% of variance)", share(vars[0]))
	p.Y.Label.Text = fmt.Sprintf("PC2 (%.0f%% of variance)", share(vars[1]))
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return nil, fmt.Errorf("viz: PCA: %w", err)
	}
	sc.Color, sc.Shape, sc.Radius = c, draw.CircleGlyph{}, 3
	p.Add(sc)
	p.Add(spacedLabels{at: pts, texts: labels, offset: 4,
		style: text.Style{Color: color.Gray{60}, Font: font.From(sans, minText), XAlign: draw.XLeft, YAlign: draw.YCenter, Handler: p.TextHandler}})
	return p, nil
}

// spacedLabels writes each text just right of its point (left of it at
// the plot's right edge), in order, leaving out any that would overlap one
// already written: at 64 tokens PCA's labels had piled into one another
// unreadably.
type spacedLabels struct {
	at     plotter.XYs
	texts  []string
	style  text.Style
	offset vg.Length
}

func (l spacedLabels) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	var placed []vg.Rectangle
	for i, xy := range l.at {
		at := vg.Point{X: trX(xy.X) + l.offset, Y: trY(xy.Y)}
		w, h := l.style.Width(l.texts[i]), l.style.Height(l.texts[i])
		if at.X+w > c.Max.X { // left of a point at the right edge, not cut off
			at.X = trX(xy.X) - l.offset - w
		}
		r := vg.Rectangle{Min: vg.Point{X: at.X, Y: at.Y - h/2}, Max: vg.Point{X: at.X + w, Y: at.Y + h/2}}
		if slices.ContainsFunc(placed, func(q vg.Rectangle) bool {
			return r.Min.X < q.Max.X && q.Min.X < r.Max.X && r.Min.Y < q.Max.Y && q.Min.Y < r.Max.Y
		}) {
			continue
		}
		placed = append(placed, r)
		c.FillText(l.style, at, l.texts[i])
	}
}

// sinkPositions splits positions by norms ([stage][position]): out are
// those whose norm at some stage is over twice the median of that stage's
// norms (attention sinks; on the default model the first token reaches
// 168 after layer 2 and the second 112, where the median is 39), top the
// largest of their norms, kept the others.
func sinkPositions(norms [][]float64) (kept, out []int, top float64) {
	if len(norms) == 0 {
		return nil, nil, 0
	}
	far := make([]bool, len(norms[0]))
	for _, row := range norms {
		med := median(row)
		for i, v := range row {
			if med > 0 && v > 2*med {
				far[i] = true
				top = max(top, v)
			}
		}
	}
	for i, f := range far {
		if f {
			out = append(out, i)
		} else {
			kept = append(kept, i)
		}
	}
	return kept, out, top
}

// median is the median of the finite values of v, or NaN if none.
func median(v []float64) float64 {
	var s []float64
	for _, x := range v {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		return math.NaN()
	}
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// positionList names positions (indices into the trace from pos0) in a
// title: "position 0", "positions 0 and 1", "positions 0, 1 and 7", or
// "5 positions" for more than four.
func positionList(idx []int, pos0 int) string {
	var names []string
	for _, i := range idx {
		names = append(names, strconv.Itoa(pos0+i))
	}
	switch {
	case len(names) == 1:
		return "position " + names[0]
	case len(names) > 4:
		return fmt.Sprintf("%d positions", len(names))
	}
	return "positions " + strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// stateNorms is the L2 norm of each of t rows of width d, per stage.
func stateNorms(xs [][]float32, t, d int) [][]float64 {
	out := make([][]float64, len(xs))
	for s, x := range xs {
		out[s] = make([]float64, t)
		for i := range t {
			var sum float64
			for _, v := range x[i*d : (i+1)*d] {
				sum += float64(v) * float64(v)
			}
			out[s][i] = math.Sqrt(sum)
		}
	}
	return out
}

// stageColor runs along viridis from green to dark purple as layers go
// deeper: consecutive layers differ in hue as well as lightness, where on
// a light-to-dark blue L1 and L2 were hard to tell apart.
func stageColor(i, n int) color.Color {
	return viridis(0.85 - 0.85*float64(i)/float64(max(1, n-1)))
}

// viridisStops are viridis at 0, 1/9, ..., 1 (R's viridis(10), from
// matplotlib's colour map).
var viridisStops = [...][3]float64{{68, 1, 84}, {72, 40, 120}, {62, 74, 137}, {49, 104, 142}, {38, 130, 142},
	{31, 158, 137}, {53, 183, 121}, {109, 205, 89}, {180, 222, 44}, {253, 231, 37}}

// viridis is the colour at t in [0, 1] of viridis, between its stops
// linearly.
func viridis(t float64) color.Color {
	f := min(max(t, 0), 1) * float64(len(viridisStops)-1)
	i := min(int(f), len(viridisStops)-2)
	f -= float64(i)
	var c [3]uint8
	for k := range c {
		c[k] = uint8(math.Round(viridisStops[i][k] + f*(viridisStops[i+1][k]-viridisStops[i][k])))
	}
	return color.RGBA{c[0], c[1], c[2], 255}
}

func pieceAt(tr *trace.Trace, i int) string {
	if i < len(tr.Pieces) {
		return tr.Pieces[i]
	}
	return fmt.Sprintf("#%d", tr.Pos0+i)
}
