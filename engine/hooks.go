package engine

import (
	"errors"
	"fmt"
	"math"
	"path"
	"slices"
	"strings"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/trace"
)

// Hook intervenes at every point whose name matches Point (a glob, as in
// Capture), as TransformerLens's run_with_hooks does. Device edits run on the
// backend with no host round trip; a host function makes the run sync, read
// the tensor, call it, and write the tensor back.
type Hook struct {
	Point string
	// Device returns the edits to make at a point of the given shape.
	Device func(name string, shape []int) ([]DeviceEdit, error)
	// Host may read and change data in place. It runs on the prefill's
	// goroutine and is not given the run's context: a cancel takes effect
	// when it returns, so one that may block must watch a context of its
	// own (the one it was given to the prefill, say) and return.
	Host func(name string, shape []int, data []float32) error

	prompts []Hook // PerPrompt's hooks, one for each prompt of a batch
	err     error  // why the constructor refused it, reported by the prefill's check
}

// PerPrompt applies hooks[i] to prompt i of a batch (Session.PrefillBatch),
// where each prompt needs its own intervention: each patched from its own
// clean run, say. The hooks must be at one point; a batch must have a hook
// for each prompt, and a prefill of one prompt takes one.
func PerPrompt(hooks ...Hook) Hook {
	if len(hooks) == 0 {
		return Hook{err: errors.New("hook: PerPrompt of no hooks")}
	}
	for i := range hooks {
		switch {
		case hooks[i].prompts != nil:
			return Hook{Point: hooks[0].Point, err: fmt.Errorf("hook: PerPrompt's hook %d is itself a PerPrompt", i)}
		case hooks[i].Point != hooks[0].Point:
			return Hook{Point: hooks[0].Point, err: fmt.Errorf("hook: PerPrompt's hooks are at %q and %q: give it hooks at one point", hooks[0].Point, hooks[i].Point)}
		}
	}
	return Hook{Point: hooks[0].Point, prompts: slices.Clone(hooks)}
}

// checkPerPrompt refuses a PerPrompt hook without a hook for each of the
// run's n prompts.
func checkPerPrompt(hooks []Hook, n int) error {
	for _, h := range hooks {
		if h.prompts != nil && len(h.prompts) != n {
			return fmt.Errorf("engine: PerPrompt hook at %q has %d hooks for %d prompts: give one for each prompt", h.Point, len(h.prompts), n)
		}
	}
	return nil
}

// DeviceEdit is an Edit whose source, if Data is set, is uploaded first.
type DeviceEdit struct {
	backend.Edit
	Data []float32
}

func (h *Hook) validate(c *model.Config) error {
	if h.err != nil {
		return h.err
	}
	for i := range h.prompts {
		if err := h.prompts[i].validate(c); err != nil {
			return fmt.Errorf("PerPrompt's hook %d: %w", i, err)
		}
	}
	if h.prompts != nil {
		return nil
	}
	if h.Device == nil && h.Host == nil {
		return fmt.Errorf("hook at %q does nothing: set Device or Host", h.Point)
	}
	for _, n := range trace.Points(c) {
		if ok, err := path.Match(h.Point, n); err != nil {
			return fmt.Errorf("hook: bad pattern %q: %w", h.Point, err)
		} else if ok {
			return nil
		}
	}
	return fmt.Errorf("hook: %q matches no point of a %d-layer %s model%s", h.Point, c.Layers, c.Arch, trace.PointHint(c, h.Point))
}

// reachesBody says whether h matches a point before the final norm: the
// points a prefill without logits (LogitsNone) reaches.
func (h *Hook) reachesBody(c *model.Config) bool {
	for _, n := range trace.Points(c) {
		if ok, _ := path.Match(h.Point, n); ok && n != "logits" && !strings.HasPrefix(n, "ln_final.") {
			return true
		}
	}
	return false
}

func hooked(hooks []Hook, name string) bool {
	for _, h := range hooks {
		if ok, _ := path.Match(h.Point, name); ok {
			return true
		}
	}
	return false
}

// applyHook applies h at the named point, whose values of the given shape
// start at element base of x (the rows of prompt seq of a batch).
// hooked reports whether a hook of the run is at the point named.
func (r *Run) hooked(name string) bool {
	for _, h := range r.o.Hooks {
		if ok, _ := path.Match(h.Point, name); ok {
			return true
		}
	}
	return false
}

func (r *Run) applyHook(h *Hook, name string, x backend.Tensor, shape []int, base, seq int) error {
	if ok, _ := path.Match(h.Point, name); !ok {
		return nil
	}
	if h.prompts != nil {
		h = &h.prompts[seq]
	}
	n := elements(shape)
	if h.Device != nil {
		edits, err := callDevice(h, name, shape)
		if err != nil {
			return err
		}
		for _, e := range edits {
			if err := r.edit(x, n, base, e); err != nil {
				return err
			}
		}
	}
	if h.Host != nil {
		if cap(r.hostScratch) < n {
			r.hostScratch = make([]float32, n)
		}
		data := r.hostScratch[:n]
		if err := r.st.Read(x, base, data); err != nil {
			return err
		}
		if err := callHost(h, name, shape, data); err != nil {
			return err
		}
		r.st.Write(x, base, data)
	}
	return nil
}

// callDevice and callHost run a hook's functions, a panic (user code's) an
// error of the prefill, which then ends as after any other error.
func callDevice(h *Hook, name string, shape []int) (edits []DeviceEdit, err error) {
	defer func() {
		if p := recover(); p != nil {
			edits, err = nil, fmt.Errorf("its Device function panicked: %v", p)
		}
	}()
	return h.Device(name, shape)
}

func callHost(h *Hook, name string, shape []int, data []float32) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("its Host function panicked: %v", p)
		}
	}()
	return h.Host(name, shape, data)
}

// edit checks an edit against the point's n elements, which start at
// element base of x, and records it.
func (r *Run) edit(x backend.Tensor, n, base int, e DeviceEdit) error {
	if e.Data != nil {
		if e.Src != nil {
			return errors.New("edit has both Src and Data: set one")
		}
		src, err := r.st.Alloc("intervention source", len(e.Data))
		if err != nil {
			return err
		}
		r.owned[r.tier] = append(r.owned[r.tier], src)
		r.st.Write(src, 0, e.Data)
		e.Src = src
	}
	if err := e.Edit.Check(n); err != nil {
		return err
	}
	e.Off += base
	r.st.Edit(x, e.Edit)
	return nil
}

// headView is the edit view of one head in a [T, heads, headDim] point.
func headView(name string, shape []int, head int) (backend.Edit, error) {
	if len(shape) != 3 {
		return backend.Edit{}, fmt.Errorf("%s has shape %v, not [T, heads, head_dim]", name, shape)
	}
	if head < 0 || head >= shape[1] {
		return backend.Edit{}, fmt.Errorf("head %d is out of range: %s has %d heads", head, name, shape[1])
	}
	return backend.Edit{Off: head * shape[2], Rows: shape[0], Cols: shape[2], Stride: shape[1] * shape[2]}, nil
}

// AblateHead zeroes one attention head's output (hook_z) in one layer.
func AblateHead(layer, head int) Hook {
	return Hook{Point: trace.LayerPoint(layer, trace.AttnZ), Device: func(name string, shape []int) ([]DeviceEdit, error) {
		e, err := headView(name, shape, head)
		e.Op = backend.EditFill
		return []DeviceEdit{{Edit: e}}, err
	}}
}

// MeanAblateHead replaces one head's output at every position with its mean
// over this prompt's positions, the BOS's included (TransformerLens users
// often take the mean over a dataset, or leave BOS out).
func MeanAblateHead(layer, head int) Hook {
	return Hook{Point: trace.LayerPoint(layer, trace.AttnZ), Device: func(name string, shape []int) ([]DeviceEdit, error) {
		e, err := headView(name, shape, head)
		e.Op = backend.EditMean
		return []DeviceEdit{{Edit: e}}, err
	}}
}

// AblateExpert keeps a mixture's expert from every token in one layer: its
// router logit becomes -Inf, so the tokens' top experts are chosen, and
// weighted, among the others. With every expert of the layer ablated,
// every slot is empty (id -1, weight 0) and the MLP adds nothing.
func AblateExpert(layer, expert int) Hook { return expertLogit(layer, expert, float32(math.Inf(-1))) }

// ForceExpert routes every token of one layer to one expert: its router
// logit becomes forcedLogit, far above any trained logit, so it comes first
// with a weight of 1 (to float32's precision). The other experts'
// probabilities are then 0, and their slots are empty (id -1, weight 0);
// so are the last slots when AblateExpert leaves fewer experts than a
// token uses.
func ForceExpert(layer, expert int) Hook { return expertLogit(layer, expert, forcedLogit) }

// forcedLogit outweighs any other logit: exp(-1e4) is 0 in float32.
const forcedLogit = 1e4

func expertLogit(layer, expert int, v float32) Hook {
	return Hook{Point: trace.LayerPoint(layer, trace.MLPRouterLogits), Device: func(name string, shape []int) ([]DeviceEdit, error) {
		if len(shape) != 2 || expert < 0 || expert >= shape[1] {
			return nil, fmt.Errorf("expert %d is out of range: %s has shape %v, [T, experts]", expert, name, shape)
		}
		return []DeviceEdit{{Edit: backend.Edit{Op: backend.EditFill, Off: expert, Rows: shape[0], Cols: 1, Stride: shape[1], Scalar: v}}}, nil
	}}
}

// Scale multiplies every point matching the glob by s.
func Scale(point string, s float32) Hook {
	return Hook{Point: point, Device: func(name string, shape []int) ([]DeviceEdit, error) {
		if f := float64(s); math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("scaling %s: the factor %v is not finite", name, s)
		}
		n := elements(shape)
		return []DeviceEdit{{Edit: backend.Edit{Op: backend.EditScale, Rows: 1, Cols: n, Scalar: s}}}, nil
	}}
}

// AddVector adds alpha*vec to every position's row of a residual-stream point
// (e.g. "blocks.3.hook_resid_post"), a steering vector; positions nil means
// all, and a negative position counts from the end (-1: the last row). A
// row named twice (3 and -1 of 4 rows, say) gets the vector once.
func AddVector(point string, vec []float32, alpha float32, positions []int) Hook {
	return Hook{Point: point, Device: func(name string, shape []int) ([]DeviceEdit, error) {
		if len(shape) != 2 || shape[1] != len(vec) {
			return nil, fmt.Errorf("vector of %d elements does not fit %s of shape %v", len(vec), name, shape)
		}
		if a := float64(alpha); math.IsNaN(a) || math.IsInf(a, 0) {
			return nil, fmt.Errorf("adding to %s: the scale %v is not finite", name, alpha)
		}
		for i, v := range vec {
			if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
				return nil, fmt.Errorf("adding to %s: element %d of the vector is %v", name, i, v)
			}
		}
		if positions == nil {
			return []DeviceEdit{{Edit: backend.Edit{Op: backend.EditAdd, Rows: shape[0], Cols: shape[1], Stride: shape[1], Scalar: alpha}, Data: vec}}, nil
		}
		var edits []DeviceEdit
		added := map[int]bool{}
		for _, p := range positions {
			if p < -shape[0] || p >= shape[0] {
				return nil, fmt.Errorf("position %d is outside %s's %d rows", p, name, shape[0])
			}
			if p < 0 {
				p += shape[0]
			}
			if added[p] {
				continue
			}
			added[p] = true
			edits = append(edits, DeviceEdit{Edit: backend.Edit{Op: backend.EditAdd, Off: p * shape[1], Rows: 1, Cols: shape[1], Scalar: alpha}, Data: vec})
		}
		return edits, nil
	}}
}

// Patch overwrites the named point, at the given rows of its first dimension
// (nil: all; negative rows count from the end), with the same point from
// another run's trace: activation patching. The source trace must have
// captured the point with the same shape.
func Patch(point string, from *trace.Trace, rows []int) Hook {
	if from == nil {
		return Hook{Point: point, err: fmt.Errorf("hook: Patch(%q) has no source trace (nil)", point)}
	}
	return Hook{Point: point, Device: func(name string, shape []int) ([]DeviceEdit, error) {
		src, err := patchSource(from, name, shape)
		if err != nil {
			return nil, err
		}
		rowLen := elements(shape[1:])
		if rows == nil {
			return []DeviceEdit{{Edit: backend.Edit{Op: backend.EditSet, Rows: 1, Cols: elements(shape)}, Data: src.Data}}, nil
		}
		var edits []DeviceEdit
		for _, r := range rows {
			p, err := rowOf(r, "row", name, shape[0])
			if err != nil {
				return nil, err
			}
			edits = append(edits, DeviceEdit{Edit: backend.Edit{Op: backend.EditSet, Off: p * rowLen, Rows: 1, Cols: rowLen}, Data: src.Data[p*rowLen : (p+1)*rowLen]})
		}
		return edits, nil
	}}
}

// PatchHead overwrites one head's hook_z [T, heads, head_dim] at the given
// positions (none: every one; negative ones count from the end) with the
// same head's from another run's trace: Patch for one head.
func PatchHead(layer, head int, from *trace.Trace, positions ...int) Hook {
	point := trace.LayerPoint(layer, trace.AttnZ)
	if from == nil {
		return Hook{Point: point, err: fmt.Errorf("hook: PatchHead(%d, %d) has no source trace (nil)", layer, head)}
	}
	return Hook{Point: point, Device: func(name string, shape []int) ([]DeviceEdit, error) {
		src, err := patchSource(from, name, shape)
		if err != nil {
			return nil, err
		}
		if len(shape) != 3 || head < 0 || head >= shape[1] {
			return nil, fmt.Errorf("head %d is out of range: %s has shape %v", head, name, shape)
		}
		off, stride := head*shape[2], shape[1]*shape[2]
		if positions == nil {
			return []DeviceEdit{{Edit: backend.Edit{Op: backend.EditSet, Off: off, Rows: shape[0], Cols: shape[2], Stride: stride, SrcOff: off, SrcStride: stride}, Data: src.Data}}, nil
		}
		var edits []DeviceEdit
		for _, pos := range positions {
			p, err := rowOf(pos, "position", name, shape[0])
			if err != nil {
				return nil, err
			}
			at := p*stride + off
			edits = append(edits, DeviceEdit{Edit: backend.Edit{Op: backend.EditSet, Off: at, Rows: 1, Cols: shape[2], SrcOff: at}, Data: src.Data})
		}
		return edits, nil
	}}
}

// patchSource is the source trace's copy of point name, which must have this
// run's shape.
func patchSource(from *trace.Trace, name string, shape []int) (*trace.Tensor, error) {
	src, err := from.Get(name)
	if err != nil {
		return nil, err
	}
	if !slices.Equal(src.Shape, shape) {
		return nil, fmt.Errorf("source trace has %s with shape %v, this run %v", name, src.Shape, shape)
	}
	if len(src.Data) != elements(shape) {
		return nil, fmt.Errorf("source trace's %s has %d elements for shape %v", name, len(src.Data), shape)
	}
	return src, nil
}

// rowOf is row r of n, negative r counting from the end; what names a row
// (row, position) in errors.
func rowOf(r int, what, name string, n int) (int, error) {
	p := r
	if p < 0 {
		p += n
	}
	if p < 0 || p >= n {
		return 0, fmt.Errorf("%s %d is outside %s's %d %ss", what, r, name, n, what)
	}
	return p, nil
}
