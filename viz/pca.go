package viz

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/stratalab/strata/gpu/trace"
)

// PCA projects the hidden states of every captured layer (hook_resid_post,
// and hook_embed when captured) onto their first two principal components:
// one colour per layer, a grey line following each position up the layers,
// and the last layer's points labelled by token. A first position whose
// norm outgrows every other's by more than twice (an attention sink) is
// left out, as the title says: it took the first component to itself and
// squeezed the other positions into a corner.
func PCA(tr *trace.Trace) (*Figure, error) {
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
	// The first position drawn; three states at least remain.
	start := 0
	if first, ok := outgrownFirst(tr, stateNorms(xs, t, d)); ok && t > 3 {
		start = 1
		title += fmt.Sprintf(" (position 0, of norm %.3g, left out)", first)
	}
	n := t - start // positions drawn
	row := func(k int) []float32 { i := start + k%n; return xs[k/n][i*d : (i+1)*d] }
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

	p := newPlot(title)
	legend := p.Legend // drawn beside the plot, where it cannot cover a point
	p.X.Label.Text = fmt.Sprintf("PC1 (%.0f%% of variance)", 100*vars[0]/total)
	p.Y.Label.Text = fmt.Sprintf("PC2 (%.0f%% of variance)", 100*vars[1]/total)
	for i := range n {
		var path plotter.XYs
		for s := range names {
			path = append(path, plotter.XY{X: proj.At(s*n+i, 0), Y: proj.At(s*n+i, 1)})
		}
		line, err := plotter.NewLine(path)
		if err != nil {
			return nil, fmt.Errorf("viz: %s: %w", name, err)
		}
		line.Color, line.Width = color.Gray{210}, 0.6
		p.Add(line)
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
		texts = append(texts, label(pieceAt(tr, start+i)))
	}
	tokens, err := plotter.NewLabels(plotter.XYLabels{XYs: at, Labels: texts})
	if err != nil {
		return nil, fmt.Errorf("viz: %s: %w", name, err)
	}
	for i := range tokens.TextStyle {
		tokens.TextStyle[i] = text.Style{Color: color.Gray{60}, Font: font.From(sans, 7), XAlign: draw.XLeft,
			YAlign: draw.YCenter, Handler: p.TextHandler}
		tokens.Offset = vg.Point{X: 4}
	}
	p.Add(tokens)
	legend.Top, legend.Left = true, true
	var legendW vg.Length
	for _, stage := range stages {
		legendW = max(legendW, legend.TextStyle.Width(stage))
	}
	legendW += legend.ThumbnailWidth + 16
	titleH := p.Title.TextStyle.Height(title) + p.Title.Padding
	return newFigure(title, 560+legendW, 460, func(c draw.Canvas) {
		p.Draw(draw.Crop(c, 0, -legendW, 0, 0))
		legend.Draw(draw.Crop(c, c.Max.X-c.Min.X-legendW+8, 0, 0, -titleH-8))
	}), nil
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

// stageColor runs from light to dark blue as layers go deeper.
func stageColor(i, n int) color.Color {
	return colorAt(blues, 0.8-0.8*float64(i)/float64(max(1, n-1)))
}

func pieceAt(tr *trace.Trace, i int) string {
	if i < len(tr.Pieces) {
		return tr.Pieces[i]
	}
	return fmt.Sprintf("#%d", tr.Pos0+i)
}
