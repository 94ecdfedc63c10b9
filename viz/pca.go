package viz

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/stratalab/strata/trace"
)

// PCA projects the hidden states of every captured layer (hook_resid_post,
// and hook_embed when captured) onto their first two principal components:
// one colour per layer, a grey line following each position up the layers
// (named in the legend), and the last layer's points labelled by token.
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
	if len(names)*t < 3 || d < 2 {
		return nil, fmt.Errorf("viz: %s: %d hidden states of width %d are too few for two principal components (want 3 states or more)", name, len(names)*t, d)
	}
	xs := make([][]float32, len(names))
	for s, n := range names {
		x, err := tensor(tr, name, n, t, d)
		if err != nil {
			return nil, err
		}
		xs[s] = x.Data
	}
	title := "Hidden states on their first two principal components"
	kept, out, top := sinkPositions(stateNorms(xs, t, d))
	if len(out) > 0 && len(kept) >= 3 {
		its := "norm to %.3g, over 2× its layer's median"
		if len(out) > 1 {
			its = "norms to %.3g, over 2× their layer's median"
		}
		title += fmt.Sprintf(" (%s left out: "+its+")", positionList(out, tr.Pos0), top)
	} else {
		kept = kept[:0]
		for i := range t {
			kept = append(kept, i)
		}
	}
	n := len(kept) // positions drawn
	row := func(k int) []float32 { i := kept[k%n]; return xs[k/n][i*d : (i+1)*d] }
	dirs, vars, total, mean := principal(row, len(names)*n, d, 2)
	if len(dirs) < 2 {
		return nil, fmt.Errorf("viz: %s: the principal component analysis of %d hidden states did not converge", name, len(names)*n)
	}
	// Project the centred states onto the first two directions.
	proj := mat.NewDense(len(names)*n, 2, nil)
	for i := range len(names) * n {
		var a, b float64
		for j, v := range row(i) {
			x := float64(v) - mean[j]
			a += x * dirs[0][j]
			b += x * dirs[1][j]
		}
		proj.Set(i, 0, a)
		proj.Set(i, 1, b)
	}

	p := newPlot("")   // the title spans the legend too: it may be wider than the plot
	legend := p.Legend // drawn beside the plot, where it cannot cover a point
	p.X.Label.Text = fmt.Sprintf("PC1 (%.0f%% of variance)", 100*vars[0]/total)
	p.Y.Label.Text = fmt.Sprintf("PC2 (%.0f%% of variance)", 100*vars[1]/total)
	p.X.Tick.Marker, p.Y.Tick.Marker = roundTicks{fewest: 4}, roundTicks{fewest: 4}
	var pathLine *plotter.Line
	for i := range n {
		var path plotter.XYs
		for s := range names {
			path = append(path, plotter.XY{X: proj.At(s*n+i, 0), Y: proj.At(s*n+i, 1)})
		}
		line, err := plotter.NewLine(path)
		if err != nil {
			return nil, fmt.Errorf("viz: %s: %w", name, err)
		}
		line.Color, line.Width = color.Gray{195}, 0.6
		p.Add(line)
		pathLine = line
	}
	for s, stage := range stages {
		var pts plotter.XYs
		for i := range n {
			pts = append(pts, plotter.XY{X: proj.At(s*n+i, 0), Y: proj.At(s*n+i, 1)})
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return nil, fmt.Errorf("viz: %s: %w", name, err)
		}
		sc.Color = stageColor(s, len(stages))
		sc.Shape = draw.CircleGlyph{}
		sc.Radius = 3
		p.Add(sc)
		if s%legendStep(len(stages)) == 0 || s == len(stages)-1 {
			legend.Add(stage, sc)
		}
	}
	last := len(names) - 1
	var at plotter.XYs
	var texts []string
	for i := range n {
		at = append(at, plotter.XY{X: proj.At(last*n+i, 0), Y: proj.At(last*n+i, 1)})
		texts = append(texts, label(pieceAt(tr, kept[i])))
	}
	p.Add(spacedLabels{at: at, texts: texts, offset: 4,
		style: text.Style{Color: color.Gray{60}, Font: font.From(sans, minText), XAlign: draw.XLeft, YAlign: draw.YCenter, Handler: p.TextHandler}})
	entries := stages
	if len(names) > 1 { // one stage has no lines between layers
		legend.Add(pathName, pathLine)
		entries = append(slices.Clip(stages), pathName)
	}
	legend.Top, legend.Left = true, true
	var legendW vg.Length
	for _, entry := range entries {
		legendW = max(legendW, legend.TextStyle.Width(entry))
	}
	legendW += legend.ThumbnailWidth + 16
	const titleH = 24
	return newFigure(title, 560+legendW, 460, func(c draw.Canvas) {
		drawTitle(c, title)
		c = draw.Crop(c, 0, 0, 0, -titleH)
		p.Draw(draw.Crop(c, 0, -legendW, 0, 0))
		legend.Draw(draw.Crop(c, c.Max.X-c.Min.X-legendW+8, 0, 0, -8))
	}), nil
}

// spacedLabels writes each text just right of its point, in order,
// leaving out any that would overlap one already written: at 64 tokens
// PCA's labels had piled into one another unreadably.
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

// pathName names, in PCA's legend, the grey lines joining each position's
// states from layer to layer.
const pathName = "one position, layer to layer"

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

// legendStep thins the legend of a deep model to about 24 entries, so that
// it fits beside the plot; the colours still run in order between them.
func legendStep(stages int) int {
	return max(1, (stages+23)/24)
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
