package viz

import (
	"fmt"
	"math"
	"slices"

	"github.com/stratalab/strata/trace"
)

// missing says what a figure needs that the trace lacks, and how to get it.
func missing(figure, what, how string) error {
	return fmt.Errorf("viz: %s needs %s, which this trace lacks: %s", figure, what, how)
}

// captureHint tells how to capture a point of every layer.
func captureHint(name string) string {
	if !trace.KnownPoint(name) {
		return fmt.Sprintf("no model has a point named %q (strata info --points lists a model's points)", name)
	}
	if l, local := trace.SplitPoint(name); l >= 0 {
		name = "blocks.*." + string(local)
	}
	return fmt.Sprintf("capture %q", name)
}

// tensor returns a captured point, checking it has the given shape.
func tensor(tr *trace.Trace, figure, name string, shape ...int) (*trace.Tensor, error) {
	if !tr.Has(name) {
		return nil, missing(figure, name, captureHint(name))
	}
	x, err := copyOf(tr, name)
	if err != nil {
		return nil, fmt.Errorf("viz: %s: %w", figure, err)
	}
	if !slices.Equal(x.Shape, shape) {
		return nil, fmt.Errorf("viz: %s: %s has shape %v, want %v from the trace's model and tokens", figure, name, x.Shape, shape)
	}
	if n := elements(shape); len(x.Data) != n {
		return nil, fmt.Errorf("viz: %s: %s holds %d values, want %d for shape %v", figure, name, len(x.Data), n, shape)
	}
	return x, nil
}

// copyOf reads a capture into memory of the figure's own rather than
// taking the trace's (Get): a figure stays right after its trace is
// closed, and Close still gives the trace's memory to the next prefill.
func copyOf(tr *trace.Trace, name string) (*trace.Tensor, error) {
	shape := tr.Shape(name)
	if len(shape) == 0 {
		return tr.Get(name) // not captured (the error says what was), or a scalar
	}
	return tr.Rows(name, 0, shape[0])
}

// elements is the number of values of shape; -1 for a negative axis or
// one past an int.
func elements(shape []int) int {
	n := 1
	for _, d := range shape {
		if d < 0 || d > 0 && n > math.MaxInt/d {
			return -1
		}
		n *= d
	}
	return n
}

// layersWith lists the layers whose point local was captured; a figure
// over layers draws those, and fails naming every-layer capture when none.
func layersWith(tr *trace.Trace, figure string, local trace.Point) ([]int, error) {
	var ls []int
	for l := range tr.Model.Layers {
		if tr.Has(trace.LayerPoint(l, local)) {
			ls = append(ls, l)
		}
	}
	if len(ls) == 0 {
		name := "blocks.*." + string(local)
		return nil, missing(figure, name, fmt.Sprintf("capture %q", name))
	}
	return ls, nil
}

// residStages lists the residual stream's captured stages bottom up: the
// embedding when captured, then each captured layer's hook_resid_post, as
// points and row labels.
func residStages(tr *trace.Trace, figure string) (points, labels []string, err error) {
	layers, err := layersWith(tr, figure, trace.ResidPost)
	if err != nil {
		return nil, nil, err
	}
	if tr.Has("hook_embed") {
		points, labels = append(points, "hook_embed"), append(labels, "embed")
	}
	for _, l := range layers {
		points, labels = append(points, trace.LayerPoint(l, trace.ResidPost)), append(labels, layerName(l))
	}
	return points, labels, nil
}

// nilTrace is the error of a figure given a nil trace.
func nilTrace(figure string) error { return fmt.Errorf("viz: %s of a nil trace", figure) }

func checkTokens(tr *trace.Trace, figure string) error {
	if len(tr.Tokens) == 0 {
		return fmt.Errorf("viz: %s: the trace has no tokens", figure)
	}
	return nil
}

func checkLayer(tr *trace.Trace, figure string, layer int) error {
	if layer < 0 || layer >= tr.Model.Layers {
		return fmt.Errorf("viz: %s: layer %d is out of range: the model has %d layers (0-%d)", figure, layer, tr.Model.Layers, tr.Model.Layers-1)
	}
	return nil
}

func checkIndex(figure, what string, i, n int) error {
	if i < 0 || i >= n {
		return fmt.Errorf("viz: %s: %s %d is out of range: the model has %d %ss (0-%d)", figure, what, i, n, what, n-1)
	}
	return nil
}

// rowNorms is the L2 norm of each position's row of capture name, checked
// to be [rows, width]; the trace reduces on the device when it can.
func rowNorms(tr *trace.Trace, figure, name string, rows, width int) ([]float64, error) {
	if !tr.Has(name) {
		return nil, missing(figure, name, captureHint(name))
	}
	if shape := tr.Shape(name); !slices.Equal(shape, []int{rows, width}) {
		return nil, fmt.Errorf("viz: %s: %s has shape %v, want %v from the trace's model and tokens", figure, name, shape, []int{rows, width})
	}
	n, err := tr.RowNorms(name)
	if err != nil {
		return nil, fmt.Errorf("viz: %s: %w", figure, err)
	}
	return n, nil
}

func layerName(l int) string { return fmt.Sprintf("L%d", l) }
