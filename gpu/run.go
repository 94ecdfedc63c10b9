package gpu

import (
	"context"
	"fmt"
	"iter"
	"slices"

	"github.com/stratalab/strata/gpu/trace"
)

// Run is a prefill in progress. A one-shot Prefill drives it to the end; a
// step-wise caller advances it a layer or a point at a time and looks at the
// trace in between. Either way the same kernels run in the same order, so a
// stepped run ends bit-identical to a one-shot one.
type Run struct {
	s      *Session
	st     Stream
	ctx    context.Context
	o      Options
	l      *layout
	tokens []int32

	x, h, q, k, v, z Tensor
	attnOut, mlpOut  Tensor
	gate, up         Tensor
	scores, pattern  Tensor
	logits, argmax   Tensor
	captures         map[string]Tensor
	owned            []Tensor
	next             func() (string, bool)
	stop             func()
	point            string // the last point reached
	done             bool
	err              error
	hostScratch      []float32
}

// Start prepares a prefill of tokens at the session's position and stops
// before the first kernel. Errors in the request (empty prompt, cache too
// small, unknown capture names, capture over budget) come back here, before
// any work.
func (s *Session) Start(ctx context.Context, tokens []int32, o Options) (*Run, error) {
	l, err := s.check(tokens, o)
	if err != nil {
		return nil, err
	}
	c := &s.e.Model.Config
	r := &Run{s: s, st: s.st, ctx: ctx, o: o, l: l, tokens: slices.Clone(tokens)}
	t := l.t
	alloc := func(name string, n int) Tensor {
		if err != nil || n == 0 {
			return nil
		}
		var x Tensor
		if x, err = r.st.Alloc(name, n); err == nil {
			r.owned = append(r.owned, x)
		}
		return x
	}
	r.x = alloc("residual", t*c.DModel)
	r.h = alloc("normalized", t*c.DModel)
	r.q = alloc("q", t*c.QDim())
	r.k = alloc("k", t*c.KVDim())
	r.v = alloc("v", t*c.KVDim())
	r.z = alloc("z", t*c.QDim())
	r.attnOut = alloc("attn_out", t*c.DModel)
	r.mlpOut = alloc("mlp_out", t*c.DModel)
	r.gate = alloc("mlp_gate", t*c.FFN)
	r.up = alloc("mlp_up", t*c.FFN)
	if l.anyMaterialized() {
		r.scores = alloc("attn_scores", c.Heads*t*l.keys)
		r.pattern = alloc("attn_pattern", c.Heads*t*l.keys)
	}
	if l.logitRows > 0 {
		r.logits = alloc("logits", l.logitRows*c.Vocab)
		if o.Predict {
			r.argmax = alloc("argmax", l.logitRows)
		}
	}
	r.captures = make(map[string]Tensor, len(l.order))
	for _, name := range l.order {
		r.captures[name] = alloc(name, elements(l.slots[name].shape))
	}
	if err != nil {
		r.release()
		return nil, fmt.Errorf("engine: prefill of %d tokens: %w", t, err)
	}
	r.next, r.stop = iter.Pull(r.program)
	return r, nil
}

// at is a named point: apply hooks, capture, then let a stepping caller pause.
func (r *Run) at(name string, x Tensor, off int, yield func(string) bool) bool {
	if r.err != nil {
		return false
	}
	shape := shapeOf(&r.s.e.Model.Config, name, r.l.t, r.l.pos0, r.l.logitRows)
	for i := range r.o.Hooks {
		if err := r.applyHook(&r.o.Hooks[i], name, x, off, shape); err != nil {
			r.fail(fmt.Errorf("hook at %s: %w", name, err))
			return false
		}
	}
	if s, ok := r.l.slots[name]; ok {
		r.st.Copy(r.captures[name], 0, x, off, elements(s.shape))
	}
	return yield(name)
}

func (r *Run) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// Point is the name of the last point the run reached ("" before the first).
func (r *Run) Point() string { return r.point }

// Done reports whether the program has finished or failed.
func (r *Run) Done() bool { return r.done }

// Err is the error that stopped the run, if any.
func (r *Run) Err() error { return r.err }

// step advances to the next point; false when the program is over.
func (r *Run) step() bool {
	if r.done {
		return false
	}
	name, ok := r.next()
	if !ok || r.err != nil {
		r.done = true
		return false
	}
	r.point = name
	return true
}

// Next advances to the end of the next layer (its hook_resid_post), or to
// the end of the program after the last layer. It returns false once the run
// is over; check Err.
func (r *Run) Next() bool {
	for r.step() {
		if _, local := SplitPoint(r.point); local == "hook_resid_post" {
			return true
		}
	}
	return false
}

// RunTo advances until the named point has been reached (and captured).
func (r *Run) RunTo(name string) error {
	if _, ok := r.l.index[name]; !ok {
		return fmt.Errorf("engine: no capture point named %q", name)
	}
	for r.step() {
		if r.point == name {
			return nil
		}
	}
	if r.err != nil {
		return r.err
	}
	return fmt.Errorf("engine: the run ended without reaching %s (it comes before %s, or its part of the program did not run)", name, r.point)
}

// Trace reads what has been captured so far.
func (r *Run) Trace() (*trace.Trace, error) {
	var reached []Tensor
	for _, name := range r.l.order {
		if r.reached(name) {
			reached = append(reached, r.captures[name])
		}
	}
	if r.done && r.err == nil {
		reached = append(reached, r.logits, r.argmax)
	}
	r.st.Download(slices.DeleteFunc(reached, func(t Tensor) bool { return t == nil })...)
	if err := r.st.Sync(); err != nil {
		return nil, err
	}
	tr := r.newTrace()
	for _, name := range r.l.order {
		s := r.l.slots[name]
		if !r.reached(name) {
			continue
		}
		x := &trace.Tensor{Shape: s.shape, Data: make([]float32, elements(s.shape))}
		if err := r.st.Read(r.captures[name], 0, x.Data); err != nil {
			return nil, err
		}
		tr.Put(name, x)
	}
	return tr, nil
}

// reached reports whether the program has passed the named point.
func (r *Run) reached(name string) bool {
	if r.done && r.err == nil {
		return true
	}
	return r.point != "" && r.l.index[name] <= r.l.index[r.point]
}

// Finish runs the rest of the prefill and returns its trace. The session's
// position advances only when the prefill completes.
func (r *Run) Finish() (*trace.Trace, error) {
	defer r.release()
	for r.step() {
	}
	if r.err != nil {
		return nil, r.err
	}
	tr, err := r.Trace()
	if err != nil {
		return nil, err
	}
	c := &r.s.e.Model.Config
	if r.logits != nil && !tr.Has("logits") {
		x := &trace.Tensor{Shape: []int{r.l.logitRows, c.Vocab}, Data: make([]float32, r.l.logitRows*c.Vocab)}
		if err := r.st.Read(r.logits, 0, x.Data); err != nil {
			return nil, err
		}
		tr.Put("logits", x)
	}
	if r.argmax != nil {
		ids := make([]float32, r.l.logitRows)
		if err := r.st.Read(r.argmax, 0, ids); err != nil {
			return nil, err
		}
		for _, f := range ids {
			tr.Predicted = append(tr.Predicted, int32(f))
		}
	}
	r.s.pos += r.l.t
	return tr, nil
}

// Close abandons an unfinished run, freeing its buffers; the session's
// position does not move.
func (r *Run) Close() { r.release() }

func (r *Run) release() {
	if r.stop != nil {
		r.stop()
		r.stop = nil
	}
	r.done = true
	for _, t := range r.owned {
		r.st.Free(t)
	}
	r.owned = nil
	// After a failed or abandoned run a GPU stream still holds recorded
	// work and defers the frees until it is submitted: submit it now, so
	// the memory is back before the next request. Its error, if any, is
	// the run's, already returned or dropped with the run.
	_ = r.st.Sync()
}

func (r *Run) newTrace() *trace.Trace {
	c := &r.s.e.Model.Config
	tr := trace.New()
	tr.Model = trace.Model{Name: c.Name, Arch: c.Arch, Layers: c.Layers, DModel: c.DModel, FFN: c.FFN,
		Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim, Vocab: c.Vocab}
	tr.Backend = r.s.e.Backend.Name()
	tr.Tokens = slices.Clone(r.tokens)
	tr.Pos0 = r.l.pos0
	if tok := r.s.e.Model.Tok; tok != nil {
		for _, id := range r.tokens {
			tr.Pieces = append(tr.Pieces, tok.Piece(id))
		}
	}
	return tr
}
