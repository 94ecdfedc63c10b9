package gpu

import (
	"fmt"
	"path"

	"github.com/stratalab/strata/gpu/trace"
)

// Hook intervenes at every point whose name matches Point (a glob, as in
// Capture), as TransformerLens's run_with_hooks does. Device edits run on the
// backend with no host round trip; a host function makes the run sync, read
// the tensor, call it, and write the tensor back.
type Hook struct {
	Point string
	// Device returns the edits to make at a point of the given shape.
	Device func(name string, shape []int) ([]DeviceEdit, error)
	// Host may read and change data in place.
	Host func(name string, shape []int, data []float32) error
}

// DeviceEdit is an Edit whose source, if Data is set, is uploaded first.
type DeviceEdit struct {
	Edit
	Data []float32
}

func (h *Hook) validate(layers int) error {
	if h.Device == nil && h.Host == nil {
		return fmt.Errorf("hook at %q does nothing: set Device or Host", h.Point)
	}
	for _, n := range Points(layers) {
		if ok, err := path.Match(h.Point, n); err != nil {
			return fmt.Errorf("hook: bad pattern %q: %w", h.Point, err)
		} else if ok {
			return nil
		}
	}
	return fmt.Errorf("hook: %q matches no point of a %d-layer model", h.Point, layers)
}

func hooked(hooks []Hook, name string) bool {
	for _, h := range hooks {
		if ok, _ := path.Match(h.Point, name); ok {
			return true
		}
	}
	return false
}

func (r *Run) applyHook(h *Hook, name string, x Tensor, off int, shape []int) error {
	if ok, _ := path.Match(h.Point, name); !ok {
		return nil
	}
	n := elements(shape)
	if h.Device != nil {
		edits, err := h.Device(name, shape)
		if err != nil {
			return err
		}
		for _, e := range edits {
			if err := r.edit(x, off, n, e); err != nil {
				return err
			}
		}
	}
	if h.Host != nil {
		if cap(r.hostScratch) < n {
			r.hostScratch = make([]float32, n)
		}
		data := r.hostScratch[:n]
		if err := r.st.Read(x, off, data); err != nil {
			return err
		}
		if err := h.Host(name, shape, data); err != nil {
			return err
		}
		r.st.Write(x, off, data)
	}
	return nil
}

// edit checks an edit against the point's extent and records it.
func (r *Run) edit(x Tensor, off, n int, e DeviceEdit) error {
	if e.Rows <= 0 || e.Cols <= 0 || e.Off < 0 || e.Off+(e.Rows-1)*e.Stride+e.Cols > n {
		return fmt.Errorf("edit of %d rows x %d at offset %d stride %d falls outside the point's %d elements", e.Rows, e.Cols, e.Off, e.Stride, n)
	}
	if e.Data != nil {
		src, err := r.st.Alloc("intervention source", len(e.Data))
		if err != nil {
			return err
		}
		r.owned = append(r.owned, src)
		r.st.Write(src, 0, e.Data)
		e.Src = src
	}
	if e.Op == EditSet || e.Op == EditAdd {
		if e.Src == nil {
			return fmt.Errorf("edit needs a source")
		}
		if last := e.SrcOff + (e.Rows-1)*e.SrcStride + e.Cols; last > e.Src.Len() {
			return fmt.Errorf("edit source of %d elements is too short for %d rows x %d (stride %d)", e.Src.Len(), e.Rows, e.Cols, e.SrcStride)
		}
	}
	e.Off += off
	r.st.Edit(x, e.Edit)
	return nil
}

// headView is the edit view of one head in a [T, heads, headDim] point.
func headView(name string, shape []int, head int) (Edit, error) {
	if len(shape) != 3 {
		return Edit{}, fmt.Errorf("%s has shape %v, not [T, heads, head_dim]", name, shape)
	}
	if head < 0 || head >= shape[1] {
		return Edit{}, fmt.Errorf("head %d is out of range: %s has %d heads", head, name, shape[1])
	}
	return Edit{Off: head * shape[2], Rows: shape[0], Cols: shape[2], Stride: shape[1] * shape[2]}, nil
}

// AblateHead zeroes one attention head's output (hook_z) in one layer.
func AblateHead(layer, head int) Hook {
	return Hook{Point: LayerPoint(layer, "attn.hook_z"), Device: func(name string, shape []int) ([]DeviceEdit, error) {
		e, err := headView(name, shape, head)
		e.Op = EditFill
		return []DeviceEdit{{Edit: e}}, err
	}}
}

// MeanAblateHead replaces one head's output at every position with its mean
// over this prompt's positions.
func MeanAblateHead(layer, head int) Hook {
	return Hook{Point: LayerPoint(layer, "attn.hook_z"), Device: func(name string, shape []int) ([]DeviceEdit, error) {
		e, err := headView(name, shape, head)
		e.Op = EditMean
		return []DeviceEdit{{Edit: e}}, err
	}}
}

// Scale multiplies every point matching the glob by s.
func Scale(point string, s float32) Hook {
	return Hook{Point: point, Device: func(name string, shape []int) ([]DeviceEdit, error) {
		n := elements(shape)
		return []DeviceEdit{{Edit: Edit{Op: EditScale, Rows: 1, Cols: n, Scalar: s}}}, nil
	}}
}

// AddVector adds alpha*vec to every position's row of a residual-stream point
// (e.g. "blocks.3.hook_resid_post"), a steering vector; positions nil means all.
func AddVector(point string, vec []float32, alpha float32, positions []int) Hook {
	return Hook{Point: point, Device: func(name string, shape []int) ([]DeviceEdit, error) {
		if len(shape) != 2 || shape[1] != len(vec) {
			return nil, fmt.Errorf("vector of %d elements does not fit %s of shape %v", len(vec), name, shape)
		}
		if positions == nil {
			return []DeviceEdit{{Edit: Edit{Op: EditAdd, Rows: shape[0], Cols: shape[1], Stride: shape[1], Scalar: alpha}, Data: vec}}, nil
		}
		var edits []DeviceEdit
		for _, p := range positions {
			if p < 0 || p >= shape[0] {
				return nil, fmt.Errorf("position %d is outside %s's %d rows", p, name, shape[0])
			}
			edits = append(edits, DeviceEdit{Edit: Edit{Op: EditAdd, Off: p * shape[1], Rows: 1, Cols: shape[1], Scalar: alpha}, Data: vec})
		}
		return edits, nil
	}}
}

// Patch overwrites the named point, at the given rows of its first dimension
// (nil: all), with the same point from another run's trace: activation
// patching. The source trace must have captured the point with the same shape.
func Patch(point string, from *trace.Trace, rows []int) Hook {
	return Hook{Point: point, Device: func(name string, shape []int) ([]DeviceEdit, error) {
		src, err := from.Get(name)
		if err != nil {
			return nil, err
		}
		if fmt.Sprint(src.Shape) != fmt.Sprint(shape) {
			return nil, fmt.Errorf("source trace has %s with shape %v, this run %v", name, src.Shape, shape)
		}
		rowLen := elements(shape[1:])
		if rows == nil {
			return []DeviceEdit{{Edit: Edit{Op: EditSet, Rows: 1, Cols: elements(shape)}, Data: src.Data}}, nil
		}
		var edits []DeviceEdit
		for _, p := range rows {
			if p < 0 || p >= shape[0] {
				return nil, fmt.Errorf("row %d is outside %s's %d rows", p, name, shape[0])
			}
			edits = append(edits, DeviceEdit{Edit: Edit{Op: EditSet, Off: p * rowLen, Rows: 1, Cols: rowLen}, Data: src.Data[p*rowLen : (p+1)*rowLen]})
		}
		return edits, nil
	}}
}
