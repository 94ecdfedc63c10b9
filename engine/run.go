package engine

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync/atomic"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/internal/human"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/trace"
)

// Run is a prefill in progress. A one-shot Prefill drives it to the end; a
// step-wise caller advances it a layer or a point at a time and looks at the
// trace in between. Either way the same kernels run in the same order, so a
// stepped run ends bit-identical to a one-shot one. Like its session, a run
// is used from one goroutine at a time: a call that finds the session busy
// with another goroutine's call fails with ErrSessionBusy.
type Run struct {
	s       *Session
	tier    int            // the tier running now
	st      backend.Stream // its stream
	scratch                // its buffers
	bufs    []scratch      // each tier's buffers
	offers  []offers       // what each tier's stream offers beyond the kernels
	ctx     context.Context
	o       Options
	l       *layout
	tokens  []int32

	arenas      []backend.Tensor          // the captures, laid out by the layout's slots, each on its points' tier
	views       map[string]backend.Tensor // where kernels write captured points in place (see into)
	device      bool                      // the arenas are the run's own, and become the trace
	owned       [][]backend.Tensor        // each tier's intervention sources, freed with the run
	next        func() (string, bool)
	stop        func()
	point       string // the last point reached
	layer       int    // the layer of the last layer point reached, -1 before one
	state       runState
	refused     atomic.Bool // the last call found the session busy: set without the session's lock, so apart from state
	err         error
	hostScratch []float32
}

// runState is where a run is in its life:
//
//	stepping        → ended     the program returned or failed (step)
//	stepping, ended → released  Close, a later Start, the session's Grow or Close
//	stepping, ended → finished  Finish (finish)
//
// released and finished are final: the run's buffers are the session's
// again, and only the error (if any) and the point reached remain.
type runState uint8

const (
	runStepping runState = iota // paused at r.point, or before the first point
	runEnded                    // the program is over; the buffers are still the run's
	runReleased                 // the buffers went back to the session before Finish
	runFinished                 // Finish ran and handed over the trace (or failed)
)

// over reports whether the run's buffers are back with the session.
func (r *Run) over() bool { return r.state >= runReleased }

// scratch is a run's buffers on one tier.
type scratch struct {
	x, h, q, k, v, z backend.Tensor
	attnOut, mlpOut  backend.Tensor
	gate, up         backend.Tensor
	moe              moeBuffers
	scale            backend.Tensor // a norm's per-row scales (hook_scale)
	scores, pattern  backend.Tensor
	logits, argmax   backend.Tensor
}

// needs lists the buffers a tier of role ro uses: the embedding needs the
// residual stream (and a row for learned positions), the layers all but
// the logits, the head the rows it normalises and the logits.
func (b *scratch) needs(c *model.Config, l *layout, o Options, ro role) []need {
	t := l.t
	needs := []need{{"residual", t * c.DModel, &b.x}}
	if ro.layers || ro.head {
		needs = append(needs, need{"normalized", t * c.DModel, &b.h})
	}
	if ro.layers {
		needs = append(needs,
			need{"q", t * c.QDim(), &b.q},
			need{"k", t * c.KVDim(), &b.k},
			need{"v", t * c.KVDim(), &b.v},
			need{"z", t * c.QDim(), &b.z})
	}
	needs = append(needs, need{"attn_out", t * c.DModel, &b.attnOut})
	if ro.layers {
		needs = append(needs, need{"mlp_out", t * c.DModel, &b.mlpOut})
	}
	if ro.layers || ro.head {
		needs = append(needs, need{"norm_scale", t, &b.scale})
	}
	if ro.layers {
		switch {
		case c.MoE():
			needs = append(needs, b.moe.needs(c, t)...)
		case c.MLP.Gated():
			needs = append(needs, need{"mlp_gate", t * c.FFN, &b.gate}, need{"mlp_up", t * c.FFN, &b.up})
		default:
			needs = append(needs, need{"mlp_gate", t * c.FFN, &b.gate})
		}
		if l.attnScratch() {
			_, n := l.mapBlocks(c.Heads)
			needs = append(needs, need{"attn_scores", n, &b.scores}, need{"attn_pattern", n, &b.pattern})
		}
	}
	if ro.head && l.logitRows > 0 {
		needs = append(needs, need{"logits", l.logitRows * c.Vocab, &b.logits})
		if o.Predict {
			needs = append(needs, need{"argmax", l.logitRows, &b.argmax})
		}
	}
	return needs
}

// Start prepares a prefill of tokens at the session's position and stops
// before the first kernel. Errors in the request (empty prompt, cache too
// small, unknown capture names, capture over budget) come back here, before
// any work. The run borrows the session's buffers: a run of the session
// that has not finished ends here, with an error saying why.
func (s *Session) Start(ctx context.Context, tokens []int32, o Options) (*Run, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.unlock()
	return s.start(ctx, tokens, o)
}

// start is Start for a caller holding the session.
func (s *Session) start(ctx context.Context, tokens []int32, o Options) (*Run, error) {
	if ctx == nil {
		return nil, errors.New("engine: nil context (use context.Background())")
	}
	l, err := s.check(tokens, o)
	if err != nil {
		return nil, err
	}
	return s.begin(ctx, l, tokens, o)
}

// begin starts a checked prefill of layout l: tokens are its prompts' tokens, packed.
func (s *Session) begin(ctx context.Context, l *layout, tokens []int32, o Options) (*Run, error) {
	s.endRun(errSuperseded)
	c, p := &s.e.Model.Config, &s.e.place
	r := &Run{s: s, ctx: ctx, o: o, l: l, tokens: slices.Clone(tokens), layer: -1}
	r.bufs = make([]scratch, len(s.tiers))
	r.owned = make([][]backend.Tensor, len(s.tiers))
	r.offers = make([]offers, len(s.tiers))
	for i := range s.tiers {
		var err error
		if r.offers[i], err = offersOf(s.e.tiers[i], s.tiers[i].st); err != nil {
			return nil, err
		}
	}
	// A GPU trace keeps its arenas (they are the trace, until read), so
	// they are made for each run; on the CPU they are the session's
	// scratch, handed over to the trace as the run ends. A trace with a
	// tier on a GPU keeps every tier's.
	for _, b := range s.e.tiers {
		r.device = r.device || onDevice(b)
	}
	if !r.device {
		r.arenas = make([]backend.Tensor, len(l.arenas))
	}
	for i := range s.tiers {
		st := s.tiers[i].st
		st.SetPrecision(o.Precision)
		needs := r.bufs[i].needs(c, l, o, p.role(i))
		for a, n := range l.arenas {
			if !r.device && r.arenaTier(a) == i {
				needs = append(needs, need{arenaName(a), n, &r.arenas[a]})
			}
		}
		if err := s.tiers[i].ws.fit(st, r.offers[i].host, needs); err != nil {
			// A refused prefill leaves the session only its KV cache. A GPU
			// stream defers frees while it holds recorded work: submit it,
			// so the memory is back before the next request.
			for j := range s.tiers {
				s.tiers[j].ws.free(s.tiers[j].st)
				_ = s.tiers[j].st.Sync()
			}
			if len(s.tiers) > 1 {
				return nil, fmt.Errorf("engine: prefill of %d tokens on tier %d (%s): %w", l.t, i, s.e.tiers[i].Name(), err)
			}
			return nil, fmt.Errorf("engine: prefill of %d tokens: %w", l.t, err)
		}
	}
	r.tier, r.st, r.scratch = p.Embed, s.tiers[p.Embed].st, r.bufs[p.Embed]
	if r.device {
		if err := r.allocArenas(); err != nil {
			return nil, fmt.Errorf("engine: prefill of %d tokens: the capture of %s (%d points) does not fit in device memory beside %s of live traces (Close traces no longer needed, or narrow the capture): %w",
				l.t, human.Bytes(4*int64(l.captureElements)), len(l.order), human.Bytes(s.e.traceBytes.Load()), err)
		}
	}
	if err := r.makeViews(); err != nil {
		if r.device {
			r.freeArenas()
		}
		return nil, err
	}
	s.run = r
	r.next, r.stop = iter.Pull(r.program)
	return r, nil
}

// arenaTier is the tier where arena i is written: that of its points.
func (r *Run) arenaTier(i int) int { return r.s.e.place.tierOfPoint(r.l.arenaPoints[i]) }

var (
	errSuperseded = errors.New("engine: a later prefill on this run's session took its buffers (finish or close a run before starting the next)")
	errFinished   = errors.New("engine: the run has finished already: Finish hands over its trace once")
	errRunOver    = errors.New("engine: the run is over and its buffers are back with the session: take the trace before Finish or Close")
)

// makeViews finds, for each captured point, a tensor its kernel can write
// in place of scratch, so that no copy follows: a view of its place in its
// arena (on the H200, copying them took 6-11 ms of a capture-all prefill
// at T=2048). Where a point has no view it goes to scratch and is copied;
// a layer that captures both its scores and its pattern has no scratch for
// them (see attnScratch), so that is an error there.
func (r *Run) makeViews() error {
	r.views = map[string]backend.Tensor{}
	for name, s := range r.l.slots {
		n, tier := elements(s.shape), r.arenaTier(s.arena)
		if t := r.s.tiers[tier].st.View(r.arenas[s.arena], s.off, n); t != nil {
			r.views[name] = t
			continue
		}
		_, p := trace.SplitPoint(name)
		if sc := &r.bufs[tier]; (p == trace.AttnScores && sc.scores == nil) || (p == trace.AttnPattern && sc.pattern == nil) {
			return fmt.Errorf("engine: prefill of %d tokens: %s (%s) cannot be bound on %s: capture fewer tokens", r.l.t, name, human.Bytes(4*int64(n)), r.s.e.tiers[tier].Name())
		}
	}
	return nil
}

// into is where a kernel writes the named point: its place in the trace
// when it has a view there, scratch otherwise. What the program computes
// next reads it from there.
func (r *Run) into(name string, scratch backend.Tensor) backend.Tensor {
	if v, ok := r.views[name]; ok {
		return v
	}
	return scratch
}

// own makes the residual stream x the named point's own before a hook
// there changes it in place: x may be where an earlier point was captured.
func (r *Run) own(name string, x backend.Tensor) backend.Tensor {
	if !hooked(r.o.Hooks, name) {
		return x
	}
	dst := r.into(name, r.x)
	if x == dst {
		return x
	}
	r.st.Copy(dst, 0, x, 0, r.l.t*r.s.e.Model.DModel)
	return dst
}

// add writes the residual stream x plus a block's output y to where the
// named point goes (the residual buffer when it is not captured), and
// returns that.
func (r *Run) add(name string, x, y backend.Tensor) backend.Tensor {
	dst := r.into(name, r.x)
	r.st.Add(dst, x, y, r.l.t*r.s.e.Model.DModel)
	return dst
}

// at is a named point: apply hooks, capture, then let a stepping caller pause.
func (r *Run) at(name string, x backend.Tensor, yield func(string) bool) bool {
	if r.err != nil {
		return false
	}
	if err := r.hook(name, x); err != nil {
		r.fail(err)
		return false
	}
	if s, ok := r.l.slots[name]; ok && !s.alias && x != r.views[name] {
		r.st.Copy(r.arenas[s.arena], s.off, x, 0, elements(s.shape))
	}
	return yield(name)
}

func (r *Run) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// Point is the name of the last point the run reached ("" before the first).
func (r *Run) Point() string {
	if r == nil {
		return ""
	}
	return r.point
}

// Layer is the layer that ran last: that of the last point reached in a
// layer, so the last layer once the run has gone on to the head; -1 before
// the first.
func (r *Run) Layer() int {
	if r == nil {
		return -1
	}
	return r.layer
}

// Done reports whether the program has finished or failed.
func (r *Run) Done() bool { return r == nil || r.state != runStepping }

// Err is the error that stopped the run, if any, or ErrSessionBusy when the
// last call (Next, say) was refused because another goroutine was using the
// session; a later call that gets through clears that.
func (r *Run) Err() error {
	if r == nil {
		return errNilRun
	}
	if r.refused.Load() {
		return ErrSessionBusy
	}
	return r.err
}

var errNilRun = errors.New("engine: nil *Run (use Session.Start)")

// lock claims the run's session for one call (see Session.lock).
func (r *Run) lock() error {
	if r == nil {
		return errNilRun
	}
	err := r.s.lock()
	r.refused.Store(errors.Is(err, ErrSessionBusy))
	return err
}

// step advances to the next point; false when the program is over.
func (r *Run) step() bool {
	if r.state != runStepping {
		return false
	}
	name, ok := r.next()
	if !ok || r.err != nil {
		r.state = runEnded
		return false
	}
	r.point = name
	if l, _ := trace.SplitPoint(name); l >= 0 {
		r.layer = l
	}
	return true
}

// Next advances to the end of the next layer (its hook_resid_post), or to
// the end of the program after the last layer. It returns false once the run
// is over; check Err.
func (r *Run) Next() bool {
	if r.lock() != nil {
		return false
	}
	defer r.s.unlock()
	for r.step() {
		if _, p := trace.SplitPoint(r.point); p == trace.ResidPost {
			return true
		}
	}
	return false
}

// RunTo advances until the named point has been reached (and captured); a
// point the run has passed is an error at once, as the run cannot go back.
func (r *Run) RunTo(name string) error {
	if err := r.lock(); err != nil {
		return err
	}
	defer r.s.unlock()
	if _, ok := r.l.index[name]; !ok {
		return fmt.Errorf("engine: no capture point named %q%s", name, trace.PointHint(&r.s.e.Model.Config, name))
	}
	if r.point == name {
		return r.err
	}
	if r.point != "" && r.reached(name) {
		return fmt.Errorf("engine: the run is past %s already: it is at %s", name, r.point)
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

// Trace reads what has been captured so far; once the run is over (Finish
// or Close), its buffers are the session's and Trace is an error.
func (r *Run) Trace() (*trace.Trace, error) {
	if err := r.lock(); err != nil {
		return nil, err
	}
	defer r.s.unlock()
	return r.trace()
}

func (r *Run) trace() (*trace.Trace, error) {
	if r.over() {
		if r.err != nil {
			return nil, r.err
		}
		return nil, errRunOver
	}
	// Slots follow program order, so the reached points fill the first arenas.
	arenas := 0
	for _, name := range r.l.order {
		if r.reached(name) {
			arenas = max(arenas, r.l.slots[name].arena+1)
		}
	}
	down := make([][]backend.Tensor, len(r.bufs))
	for i, a := range r.arenas[:arenas] {
		down[r.arenaTier(i)] = append(down[r.arenaTier(i)], a)
	}
	if r.state == runEnded && r.err == nil {
		head := r.s.e.place.Head
		down[head] = append(down[head], r.bufs[head].logits, r.bufs[head].argmax)
	}
	for i, ts := range down {
		st := r.s.tiers[i].st
		st.Download(slices.DeleteFunc(ts, func(t backend.Tensor) bool { return t == nil })...)
		if err := st.Sync(); err != nil {
			r.fail(err) // Sync hands the error over once: the run keeps it
			return nil, err
		}
	}
	tr := r.newTrace()
	data := r.hostMemory()
	for i, name := range r.l.order {
		if !r.reached(name) {
			continue
		}
		s := r.l.slots[name]
		if err := r.s.tiers[r.arenaTier(s.arena)].st.Read(r.arenas[s.arena], s.off, data[i]); err != nil {
			return nil, err
		}
		tr.Put(name, &trace.Tensor{Shape: s.shape, Data: data[i]})
	}
	return tr, nil
}

// handOver makes a finished run's arenas its trace, without copying them,
// where every tier's tensors are Go memory; nil elsewhere. The arenas leave
// the session's workspace: the trace owns them, and a slice of it a caller
// keeps stays valid, whatever the session does next.
func (r *Run) handOver() *trace.Trace {
	if r.over() { // trace says why
		return nil
	}
	for _, o := range r.offers {
		if o.host == nil {
			return nil
		}
	}
	tr := r.newTrace()
	arenas := make([]*trace.Arena, len(r.arenas))
	for a, t := range r.arenas {
		h := r.offers[r.arenaTier(a)].host
		arenas[a] = &trace.Arena{Recycle: func() { h.RecycleArena(t) }}
	}
	for _, name := range r.l.order {
		s := r.l.slots[name]
		n := elements(s.shape)
		data := r.offers[r.arenaTier(s.arena)].host.HostData(r.arenas[s.arena])
		tr.PutView(name, &trace.Tensor{Shape: s.shape, Data: data[s.off : s.off+n : s.off+n]}, arenas[s.arena])
	}
	for a := range r.arenas {
		r.s.tiers[r.arenaTier(a)].ws.drop(arenaName(a))
	}
	return tr
}

// hostMemory makes the trace's memory for every reached point, in program
// order (nil for the others).
func (r *Run) hostMemory() [][]float32 {
	sizes := make([]int, len(r.l.order))
	for i, name := range r.l.order {
		if r.reached(name) {
			sizes[i] = elements(r.l.slots[name].shape)
		}
	}
	return trace.MakeData(sizes)
}

// reached reports whether the program has passed the named point.
func (r *Run) reached(name string) bool {
	if r.state != runStepping && r.err == nil {
		return true
	}
	return r.point != "" && r.l.index[name] <= r.l.index[r.point]
}

// Finish runs the rest of the prefill and returns its trace. The session's
// position advances only when the prefill completes.
func (r *Run) Finish() (*trace.Trace, error) {
	if err := r.lock(); err != nil {
		return nil, err
	}
	defer r.s.unlock()
	return r.finish()
}

func (r *Run) finish() (*trace.Trace, error) {
	if r.over() { // its buffers are the session's again
		switch {
		case r.err != nil:
			return nil, r.err
		case r.state == runFinished:
			return nil, errFinished
		}
		return nil, errRunOver
	}
	defer r.release(runFinished)
	for r.step() {
	}
	if r.err != nil {
		return nil, r.err
	}
	var tr *trace.Trace
	if r.device {
		for i := range r.s.tiers {
			if err := r.s.tiers[i].st.Sync(); err != nil {
				r.fail(err)
				return nil, err
			}
		}
		tr = r.newTrace()
		r.keep(tr)
	} else if tr = r.handOver(); tr == nil {
		var err error
		if tr, err = r.trace(); err != nil {
			return nil, err
		}
	}
	c := &r.s.e.Model.Config
	head, st := r.bufs[r.s.e.place.Head], r.s.tiers[r.s.e.place.Head].st
	if head.logits != nil && !tr.Has(string(trace.Logits)) {
		x := &trace.Tensor{Shape: []int{r.l.logitRows, c.Vocab}, Data: make([]float32, r.l.logitRows*c.Vocab)}
		if err := st.Read(head.logits, 0, x.Data); err != nil {
			return nil, err
		}
		tr.Put(string(trace.Logits), x)
	}
	if head.argmax != nil {
		ids := make([]float32, r.l.logitRows)
		if err := st.Read(head.argmax, 0, ids); err != nil {
			return nil, err
		}
		for _, f := range ids {
			tr.Predicted = append(tr.Predicted, int32(f))
		}
	}
	r.s.pos.Store(int64(r.l.pos0 + r.l.t))
	return tr, nil
}

// Close abandons an unfinished run, handing its buffers back to the
// session; the session's position does not move. A run whose session is
// closed, or busy on another goroutine, is left as it is (the session's
// next prefill or Close ends it).
func (r *Run) Close() {
	if r.lock() != nil {
		return
	}
	defer r.s.unlock()
	r.release(runReleased)
}

// release ends the run in the final state to, handing its buffers back to
// the session; a run already over stays as it is.
func (r *Run) release(to runState) {
	if r.stop != nil {
		r.stop()
		r.stop = nil
	}
	if r.over() {
		return
	}
	r.state = to
	if r.s.run == r {
		r.s.run = nil
	}
	for i, ts := range r.owned {
		for _, t := range ts {
			r.s.tiers[i].st.Free(t)
		}
	}
	r.owned = nil
	if r.device {
		r.freeArenas() // none when a trace took them
	}
	// After a failed or abandoned run a GPU stream still holds recorded
	// work and defers the frees until it is submitted: submit it now, so
	// the memory is back before the next request. Its error, if any, is
	// the run's, already returned or dropped with the run.
	for i := range r.s.tiers {
		_ = r.s.tiers[i].st.Sync()
	}
}

func (r *Run) newTrace() *trace.Trace {
	tr := trace.New()
	tr.Model = TraceModel(&r.s.e.Model.Config)
	tr.Backend = r.s.e.BackendName()
	tr.Tokens = slices.Clone(r.tokens)
	tr.Pos0 = r.l.pos0
	if tok := r.s.e.Model.Tok; tok != nil {
		for _, id := range r.tokens {
			tr.Pieces = append(tr.Pieces, tok.Piece(id))
		}
	}
	return tr
}

// TraceModel is what a trace records of the model c (nothing of a nil one).
func TraceModel(c *model.Config) trace.Model {
	if c == nil {
		return trace.Model{}
	}
	m := trace.Model{Name: c.Name, Arch: c.Arch, Layers: c.Layers, DModel: c.DModel, FFN: c.FFN,
		Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim, Vocab: c.Vocab, LearnedPos: c.Pos == model.PosLearned,
		Experts: c.Experts}
	if c.SWAPattern > 0 {
		m.Windows = make([]int, c.Layers)
		for l := range c.Layers {
			m.Windows[l] = c.Window(l)
		}
	}
	return m
}
