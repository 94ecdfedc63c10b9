package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/internal/human"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/trace"
)

// Engine is a model made resident on a backend, or split over several
// (tiers). It is safe for concurrent use by several sessions.
type Engine struct {
	Model *model.Model
	// Backend is the first tier's backend (the only one, unsplit).
	Backend  backend.Backend
	tiers    []backend.Backend
	place    Placement
	embed    backend.Matrix // on the embedding tier
	posEmbed backend.Matrix // learned positions only
	output   backend.Matrix // on the head tier, as are the final norm's weights
	outNorm  backend.Tensor
	outBias  backend.Tensor // LayerNorm's bias
	layers   []layerWeights // each on its layer's home tier
	// traceBytes counts the device memory of live GPU traces.
	traceBytes atomic.Int64
}

type layerWeights struct {
	attnNorm, ffnNorm         backend.Tensor
	attnNormBias, ffnNormBias backend.Tensor
	attnPostNorm, ffnPostNorm backend.Tensor
	q, k, v, o                backend.Matrix
	qBias, kBias, vBias       backend.Tensor
	oBias                     backend.Tensor
	qNorm, kNorm              backend.Tensor
	gate, up, down            backend.Matrix
	upBias, downBias          backend.Tensor
	router                    backend.Matrix
	experts                   [][3]backend.Matrix // gate, up, down per expert
}

// NewEngine uploads the model's weights to the backend once.
func NewEngine(m *model.Model, b backend.Backend) (*Engine, error) {
	if m == nil || b == nil {
		return nil, fmt.Errorf("engine: NewEngine needs a model and a backend (got model %v, backend %v)", m != nil, b != nil)
	}
	return NewTieredEngine(m, []backend.Backend{b}, OneTier(m.Layers))
}

// NewTieredEngine uploads each part of the model once, to the tier the
// placement gives it: tier i is tiers[i]. Tied embeddings whose embedding
// and head tiers differ are uploaded to both.
func NewTieredEngine(m *model.Model, tiers []backend.Backend, p Placement) (*Engine, error) {
	if m == nil || len(tiers) == 0 || slices.Contains(tiers, nil) {
		return nil, fmt.Errorf("engine: NewTieredEngine needs a model and a backend for each tier (got model %v, %d backends, a nil one %v)", m != nil, len(tiers), slices.Contains(tiers, nil))
	}
	if len(m.Blocks) != m.Layers || m.Embed == nil {
		return nil, fmt.Errorf("engine: model %q is not loaded: %d layers configured, %d bound (use model.Open or model.Load)", m.Name, m.Layers, len(m.Blocks))
	}
	if err := p.check(&m.Config, len(tiers)); err != nil {
		return nil, err
	}
	e := &Engine{Model: m, Backend: tiers[0], tiers: slices.Clone(tiers), place: p}
	e.place.Layers = slices.Clone(p.Layers)
	sts := make([]backend.Stream, len(tiers))
	for i, b := range tiers {
		sts[i] = b.NewStream()
		defer sts[i].Close()
	}
	var err error
	failed := -1 // the tier that failed
	upload := func(tier int, w *model.Weight) backend.Matrix {
		if err != nil || w == nil {
			return nil
		}
		var x backend.Matrix
		if x, err = tiers[tier].Upload(w); err != nil {
			failed = tier
		}
		return x
	}
	vector := func(tier int, name string, v []float32) backend.Tensor {
		if err != nil || v == nil {
			return nil
		}
		var t backend.Tensor
		if t, err = sts[tier].Alloc(name, len(v)); err == nil {
			sts[tier].Write(t, 0, v)
		} else {
			failed = tier
		}
		return t
	}
	e.embed = upload(p.Embed, m.Embed)
	e.posEmbed = upload(p.Embed, m.PosEmbed)
	switch {
	case !m.TiedEmbd:
		e.output = upload(p.Head, m.Output)
	case p.Head == p.Embed:
		e.output = e.embed
	default:
		e.output = upload(p.Head, m.Embed)
	}
	e.outNorm = vector(p.Head, "output_norm", m.OutNorm)
	e.outBias = vector(p.Head, "output_norm.bias", m.OutNormBias)
	e.layers = make([]layerWeights, len(m.Blocks))
	for i := range m.Blocks {
		l, w, tier := &m.Blocks[i], &e.layers[i], p.Layers[i]
		name := func(s string) string { return fmt.Sprintf("blk.%d.%s", i, s) }
		vec := func(s string, v []float32) backend.Tensor { return vector(tier, name(s), v) }
		up := func(w *model.Weight) backend.Matrix { return upload(tier, w) }
		w.attnNorm = vec("attn_norm", l.AttnNorm)
		w.ffnNorm = vec("ffn_norm", l.FFNNorm)
		w.attnNormBias = vec("attn_norm.bias", l.AttnNormBias)
		w.ffnNormBias = vec("ffn_norm.bias", l.FFNNormBias)
		w.attnPostNorm = vec("post_attention_norm", l.AttnPostNorm)
		w.ffnPostNorm = vec("post_ffw_norm", l.FFNPostNorm)
		w.oBias = vec("attn_output.bias", l.OBias)
		w.upBias = vec("ffn_up.bias", l.UpBias)
		w.downBias = vec("ffn_down.bias", l.DownBias)
		w.q, w.k, w.v, w.o = up(l.Q), up(l.K), up(l.V), up(l.O)
		w.qBias = vec("attn_q.bias", l.QBias)
		w.kBias = vec("attn_k.bias", l.KBias)
		w.vBias = vec("attn_v.bias", l.VBias)
		w.qNorm = vec("attn_q_norm", l.QNorm)
		w.kNorm = vec("attn_k_norm", l.KNorm)
		w.gate, w.up, w.down = up(l.Gate), up(l.Up), up(l.Down)
		w.router = up(l.Router)
		if len(l.Experts) > 0 && err == nil {
			var ws []*model.Weight
			for _, x := range l.Experts {
				ws = append(ws, x.Gate, x.Up, x.Down)
			}
			var ms []backend.Matrix
			if ms, err = tiers[tier].UploadGroup(ws); err == nil {
				for e := range l.Experts {
					w.experts = append(w.experts, [3]backend.Matrix{ms[3*e], ms[3*e+1], ms[3*e+2]})
				}
			} else {
				failed = tier
			}
		}
	}
	for i := range sts {
		if err == nil {
			if err = sts[i].Sync(); err != nil {
				failed = i
			}
		}
	}
	if err != nil {
		if len(tiers) == 1 {
			return nil, fmt.Errorf("engine: uploading %s to %s: %w", m.Name, tiers[0].Name(), err)
		}
		return nil, fmt.Errorf("engine: uploading %s to tier %d (%s): %w", m.Name, failed, tiers[failed].Name(), err)
	}
	return e, nil
}

// Placement is where the engine's parts live: all on tier 0 unless it was
// made by NewTieredEngine.
func (e *Engine) Placement() Placement {
	p := e.place
	p.Layers = slices.Clone(p.Layers)
	return p
}

// BackendName names the backend, or each tier's and the placement, as
// traces and benchmarks show it.
func (e *Engine) BackendName() string {
	if len(e.tiers) == 1 {
		return e.tiers[0].Name()
	}
	names := make([]string, len(e.tiers))
	for i, b := range e.tiers {
		names[i] = b.Name()
	}
	if slices.Equal(names[1:], names[:len(names)-1]) {
		return fmt.Sprintf("%d x %s (tiers %s)", len(names), names[0], e.place)
	}
	return fmt.Sprintf("%s (tiers %s)", strings.Join(names, " + "), e.place)
}

// Tiers are the backends the engine's parts live on, tier by tier.
func (e *Engine) Tiers() []backend.Backend { return slices.Clone(e.tiers) }

// Logits says which positions get final norm and LM head.
type Logits int

const (
	LogitsLast Logits = iota // the last position only (generation)
	LogitsAll                // every position (speculative-decoding verify, logit lens)
	LogitsNone               // skip the LM head
)

// DefaultBudget is the capture memory a prefill may use unless Options say otherwise.
const DefaultBudget = 4 << 30

// Options controls one prefill.
type Options struct {
	Capture Capture
	Logits  Logits
	// Predict stores the argmax token of each logit row in the trace.
	Predict bool
	Hooks   []Hook
	// Budget bounds the captured bytes; 0 means DefaultBudget.
	Budget int64
	// Precision of the matrix products: PrecisionExact (the default) or PrecisionFast.
	Precision Precision
}

// Session is one conversation with an engine: a KV cache and a position.
// A session is used from one goroutine at a time: a call made while
// another goroutine's call on the same session (or on one of its runs) is in
// progress fails with ErrSessionBusy and changes nothing. Different sessions
// of one engine run concurrently.
type Session struct {
	e        *Engine
	tiers    []sessionTier // one per engine tier
	capacity int
	longRope bool // the model's LongRope, not Rope
	pos      atomic.Int64
	cacheK   []backend.Tensor // each on its layer's home tier
	cacheV   []backend.Tensor
	run      *Run // the run holding the tiers' workspaces, until it ends

	readMu sync.Mutex                // orders reads of the session's device traces
	traces map[*deviceTrace]struct{} // live device traces, freed with the session
	host   hostSpare                 // host memory closed traces' reads give back

	mu       sync.Mutex  // held by the call in progress
	closing  atomic.Bool // Close was called: whoever holds mu closes
	isClosed bool        // under mu
}

// sessionTier is a session's part on one tier.
type sessionTier struct {
	st backend.Stream
	ws workspace // the last prefill's buffers, for the next
	// Under the session's readMu:
	reader backend.Stream   // device traces' reads' own stream, made on first read
	spare  []backend.Tensor // a closed trace's arenas, for the next run to reuse
}

var (
	// ErrSessionBusy is returned by a call on a session (or its run) while
	// another goroutine's call on it is in progress. Use one session per
	// goroutine, or serialise the calls.
	ErrSessionBusy = errors.New("engine: the session is in use by another goroutine (a session runs one call at a time; use a session per goroutine)")
	// ErrSessionClosed is returned by a call on a closed session or on a
	// run of one.
	ErrSessionClosed = errors.New("engine: the session was closed")
	errNilSession    = errors.New("engine: nil *Session (use Engine.NewSession)")
)

// NewSession allocates a KV cache for capacity positions (0: the model's context length).
func (e *Engine) NewSession(capacity int) (*Session, error) {
	if e == nil || e.Model == nil || e.Backend == nil {
		return nil, errors.New("engine: nil or unbuilt *Engine (use NewEngine)")
	}
	c := &e.Model.Config
	if capacity < 0 {
		return nil, fmt.Errorf("engine: KV cache of %d positions: the capacity must be 0 (the model's context, %d) or positive", capacity, c.Context)
	}
	if capacity == 0 {
		capacity = c.Context
	}
	if capacity > c.Context {
		return nil, fmt.Errorf("engine: KV cache of %d positions exceeds the model's context length %d", capacity, c.Context)
	}
	s := &Session{e: e, capacity: capacity, tiers: make([]sessionTier, len(e.tiers))}
	for i, b := range e.tiers {
		s.tiers[i].st = b.NewStream()
	}
	// Phi-3: a cache past the original context takes the long RoPE
	// factors for all its positions, as llama.cpp chooses by its context.
	s.longRope = c.LongRope != nil && capacity > c.Rope.Scaling.OrigContext
	for l := 0; l < c.Layers; l++ {
		st := s.tiers[e.place.Layers[l]].st
		k, err := st.Alloc(fmt.Sprintf("blocks.%d.attn.cache_k", l), capacity*c.KVDim())
		if err != nil {
			s.Close()
			return nil, err
		}
		s.cacheK = append(s.cacheK, k)
		v, err := st.Alloc(fmt.Sprintf("blocks.%d.attn.cache_v", l), capacity*c.KVDim())
		if err != nil {
			s.Close()
			return nil, err
		}
		s.cacheV = append(s.cacheV, v)
	}
	return s, nil
}

// ropeAt is the RoPE this session's layer uses.
func (s *Session) ropeAt(layer int) *model.Rope {
	if s.longRope {
		return s.e.Model.LongRope
	}
	return s.e.Model.RopeAt(layer)
}

// lock claims the session for one call: ErrSessionBusy while another
// goroutine holds it, ErrSessionClosed once it is closed.
func (s *Session) lock() error {
	if s == nil {
		return errNilSession
	}
	if !s.mu.TryLock() {
		return ErrSessionBusy
	}
	if s.isClosed || s.closing.Load() {
		s.unlock()
		return ErrSessionClosed
	}
	return nil
}

// unlock ends a call, first carrying out a Close that arrived during it.
func (s *Session) unlock() {
	for {
		if s.closing.Load() && !s.isClosed {
			s.close()
		}
		closed := s.isClosed
		s.mu.Unlock()
		// A Close that found the session busy after the check above is
		// seen here: take the lock back and close, unless another call
		// has it now (it closes as it ends).
		if closed || !s.closing.Load() || !s.mu.TryLock() {
			return
		}
	}
}

// Close ends the session's unfinished run, if any, and frees the session's
// KV cache and prefill buffers. Called while another goroutine's call on the
// session is in progress, it returns at once and that call closes the
// session as it ends. Later calls fail with ErrSessionClosed; Close again
// does nothing.
func (s *Session) Close() {
	if s == nil {
		return
	}
	s.closing.Store(true)
	if s.mu.TryLock() {
		if !s.isClosed {
			s.close()
		}
		s.mu.Unlock()
	}
}

func (s *Session) close() {
	s.isClosed = true
	s.endRun(ErrSessionClosed)
	s.freeTraces()
	for i := range s.tiers {
		s.tiers[i].ws.free(s.tiers[i].st)
	}
	for l, t := range s.cacheK {
		s.tiers[s.e.place.Layers[l]].st.Free(t)
	}
	for l, t := range s.cacheV {
		s.tiers[s.e.place.Layers[l]].st.Free(t)
	}
	s.cacheK, s.cacheV = nil, nil
	// Release the streams' own buffers now rather than when they are
	// collected; an error here belongs to work that is being thrown away.
	for i := range s.tiers {
		s.tiers[i].st.Close()
	}
}

// endRun stops the run holding the session's buffers, if any, so that they
// can go to a new run or be freed; the run's calls then return why.
func (s *Session) endRun(why error) {
	if s.run != nil {
		s.run.fail(why)
		s.run.release()
	}
}

// Engine is the engine the session runs on.
func (s *Session) Engine() *Engine {
	if s == nil {
		return nil
	}
	return s.e
}

// Pos is the position the next prefill starts at.
func (s *Session) Pos() int {
	if s == nil {
		return 0
	}
	return int(s.pos.Load())
}

// Capacity is the KV cache's length in positions.
func (s *Session) Capacity() int {
	if s == nil {
		return 0
	}
	return s.capacity
}

// Reset forgets the cached positions; the next prefill starts at 0. It
// fails only as every call does: on a busy, closed or nil session.
func (s *Session) Reset() error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.unlock()
	s.pos.Store(0)
	return nil
}

// Grow makes the session's KV cache hold capacity positions (at most the
// model's context), keeping the positions it holds: a session can start
// small and grow as prompts need, where a cache of a long context would
// take gigabytes of device memory for a short prompt. A smaller capacity
// changes nothing. An unfinished step-wise run ends.
func (s *Session) Grow(capacity int) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.unlock()
	c := &s.e.Model.Config
	switch {
	case capacity <= s.capacity:
		return nil
	case capacity > c.Context:
		return fmt.Errorf("engine: KV cache of %d positions exceeds the model's context length %d", capacity, c.Context)
	}
	longRope := c.LongRope != nil && capacity > c.Rope.Scaling.OrigContext
	if longRope != s.longRope && s.Pos() > 0 {
		return fmt.Errorf("engine: a KV cache of %d positions takes the model's long RoPE factors for every position, and the %d cached positions were made with the short ones: start a session of %d positions", capacity, s.Pos(), capacity)
	}
	s.endRun(errSuperseded)
	kvd, keep := c.KVDim(), s.Pos()*c.KVDim()
	k, v := make([]backend.Tensor, c.Layers), make([]backend.Tensor, c.Layers)
	free := func() {
		for l := range c.Layers {
			st := s.tiers[s.e.place.Layers[l]].st
			for _, t := range []backend.Tensor{k[l], v[l]} {
				if t != nil {
					st.Free(t)
				}
			}
		}
	}
	for l := range c.Layers {
		st := s.tiers[s.e.place.Layers[l]].st
		var err error
		if k[l], err = st.Alloc(fmt.Sprintf("blocks.%d.attn.cache_k", l), capacity*kvd); err == nil {
			v[l], err = st.Alloc(fmt.Sprintf("blocks.%d.attn.cache_v", l), capacity*kvd)
		}
		if err != nil {
			free()
			return err
		}
		if keep > 0 {
			st.Copy(k[l], 0, s.cacheK[l], 0, keep)
			st.Copy(v[l], 0, s.cacheV[l], 0, keep)
		}
	}
	for i := range s.tiers {
		if err := s.tiers[i].st.Sync(); err != nil {
			free()
			return err
		}
	}
	k, s.cacheK = s.cacheK, k
	v, s.cacheV = s.cacheV, v
	free() // the old caches
	s.capacity, s.longRope = capacity, longRope
	return nil
}

// Rewind moves the position back to pos, as when a speculative draft is rejected.
func (s *Session) Rewind(pos int) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.unlock()
	if now := s.Pos(); pos < 0 || pos > now {
		return fmt.Errorf("engine: cannot rewind to position %d (session is at %d)", pos, now)
	}
	s.pos.Store(int64(pos))
	return nil
}

// Prefill runs tokens through every layer in one go, at the session's
// position: after an earlier prefill it continues that prompt (its keys and
// values are in the cache). Reset first to start a new one.
func (s *Session) Prefill(ctx context.Context, tokens []int32, o Options) (*trace.Trace, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.unlock()
	r, err := s.start(ctx, tokens, o)
	if err != nil {
		return nil, err
	}
	return r.finish()
}

// Estimate is the memory a prefill needs beyond the resident weights, in bytes.
type Estimate struct {
	Scratch int64 // activations, scores and logits of this prefill
	Capture int64 // the captured tensors
	Cache   int64 // the session's KV cache
}

// Total sums the parts.
func (m Estimate) Total() int64 { return m.Scratch + m.Capture + m.Cache }

// EstimateMemory says what a prefill of t tokens at pos0 with options o
// needs, for a session of the given cache capacity. A session keeps a
// prefill's scratch and capture buffers for the next one (until Close), each
// at most twice the size the next one needs. Negative counts count as 0:
// callers refuse them (a prefill's check does).
func EstimateMemory(c *model.Config, t, pos0, capacity int, o Options) Estimate {
	t, pos0, capacity = max(t, 0), max(pos0, 0), max(capacity, 0)
	l := newLayout(c, t, pos0, o)
	var est Estimate
	est.Scratch = 4 * int64(l.scratchElements(c, o))
	est.Capture = 4 * int64(l.captureElements)
	est.Cache = 4 * 2 * int64(c.Layers) * int64(capacity) * int64(c.KVDim())
	return est
}

// layout is the plan of one prefill's memory: the sizes of its scratch and
// where each captured point goes. Captured points are packed in program
// order into arenas, one per layer (and one each before and after the
// layers; attention scores and patterns each in one of their own), split
// where one would pass arenaCap, so that a trace comes back
// in a few downloads and a step-wise run downloads each layer once.
type layout struct {
	t, pos0, keys, logitRows int
	materialize              []bool // per layer: scores and pattern needed
	slots                    map[string]slot
	order                    []string
	index                    map[string]int // every point's place in program order
	arenas                   []int          // each arena's size in elements
	arenaPoints              []string       // each arena's first point
	captureElements          int
}

// arenaCap bounds an arena unless one point is larger: 128 MiB, the largest
// storage buffer every Vulkan device must support.
const arenaCap = 1 << 25

// slot is a captured point: its shape, and where it lies in which arena.
// An alias shares the slot of an earlier point that holds the same values
// (see sameAs), so that it is never copied.
type slot struct {
	shape      []int
	arena, off int
	alias      bool
}

// sameAs is the earlier point whose values the named point has when no
// hook sits at it, or "": the residual stream entering a layer is the one
// leaving the layer before (or the embedding), and the KV cache of a
// prefill from position 0 is its keys and values. TransformerLens's cache
// shares their storage too.
func sameAs(c *model.Config, name string, pos0 int) string {
	layer, local := SplitPoint(name)
	switch {
	case local == "hook_resid_pre" && layer > 0:
		return LayerPoint(layer-1, "hook_resid_post")
	case local == "hook_resid_pre" && c.Pos != model.PosLearned:
		return "hook_embed"
	case local == "attn.cache_k" && pos0 == 0 && c.Pos == model.PosRope:
		return LayerPoint(layer, "attn.hook_rot_k")
	case local == "attn.cache_k" && pos0 == 0:
		return LayerPoint(layer, "attn.hook_k")
	case local == "attn.cache_v" && pos0 == 0:
		return LayerPoint(layer, "attn.hook_v")
	}
	return ""
}

func newLayout(c *model.Config, t, pos0 int, o Options) *layout {
	l := &layout{t: t, pos0: pos0, keys: pos0 + t, slots: map[string]slot{}, index: map[string]int{}}
	switch o.Logits {
	case LogitsLast:
		l.logitRows = 1
	case LogitsAll:
		l.logitRows = t
	}
	if l.logitRows == 0 && (o.Capture.Selects("ln_final.hook_scale") || o.Capture.Selects("ln_final.hook_normalized") || o.Capture.Selects("logits")) {
		l.logitRows = t
	}
	l.materialize = make([]bool, c.Layers)
	arenaLayer, lastAlone := 0, false
	for i, name := range Points(c) {
		l.index[name] = i
		layer, local := SplitPoint(name)
		captured := o.Capture.Selects(name)
		if layer >= 0 && (local == "attn.hook_attn_scores" || local == "attn.hook_pattern") && (captured || hooked(o.Hooks, name)) {
			l.materialize[layer] = true
		}
		if !captured {
			continue
		}
		shape := shapeOf(c, name, t, pos0, l.logitRows)
		n := elements(shape)
		if n == 0 {
			continue
		}
		if s, ok := l.slots[sameAs(c, name, pos0)]; ok && !hooked(o.Hooks, name) {
			l.slots[name] = slot{shape: shape, arena: s.arena, off: s.off, alias: true}
			l.order = append(l.order, name)
			continue
		}
		// The points before the first layer (-1) and after the last are in
		// no layer, and never share an arena: they may be on different tiers.
		if layer < 0 && name != "hook_embed" && name != "hook_pos_embed" {
			layer = c.Layers
		}
		// Attention scores and patterns get arenas of their own: the CPU
		// keeps a recycled arena's masked entries rather than write them
		// again, which it knows of whole arenas only.
		alone := local == "attn.hook_attn_scores" || local == "attn.hook_pattern"
		if last := len(l.arenas) - 1; last < 0 || layer != arenaLayer || l.arenas[last]+n > arenaCap || alone || lastAlone {
			l.arenas = append(l.arenas, 0)
			l.arenaPoints = append(l.arenaPoints, name)
			arenaLayer = layer
		}
		lastAlone = alone
		last := len(l.arenas) - 1
		off := (l.arenas[last] + backend.SlotAlign - 1) / backend.SlotAlign * backend.SlotAlign
		l.slots[name] = slot{shape: shape, arena: last, off: off}
		l.captureElements += off + n - l.arenas[last]
		l.arenas[last] = off + n
		l.order = append(l.order, name)
	}
	return l
}

// positions are the ids of the prefill's positions, pos0.., for a table
// of learned position embeddings.
func (l *layout) positions() []int32 {
	ids := make([]int32, l.t)
	for i := range ids {
		ids[i] = int32(l.pos0 + i)
	}
	return ids
}

func (l *layout) anyMaterialized() bool {
	for _, m := range l.materialize {
		if m {
			return true
		}
	}
	return false
}

// attnScratch reports whether a layer's scores or pattern go to scratch:
// it materialises them (a hook on them) without capturing both, which
// would be written in their arenas.
func (l *layout) attnScratch() bool {
	for layer, m := range l.materialize {
		for _, local := range []string{"attn.hook_attn_scores", "attn.hook_pattern"} {
			if _, captured := l.slots[LayerPoint(layer, local)]; m && !captured {
				return true
			}
		}
	}
	return false
}

func (l *layout) scratchElements(c *model.Config, o Options) int {
	n := 0
	for _, q := range (&scratch{}).needs(c, l, o, role{embed: true, layers: true, head: true}) {
		n += q.n
	}
	return n + gemmPacking(c, l, role{embed: true, layers: true, head: true})
}

// gemmPacking is the elements of the copies the CPU backend's kernels pack
// (gpu/cpu/gemm.go, attention.go): the widest input of the tier's products,
// and the values of every key, head dims rounded up to 16; counted for
// every backend.
func gemmPacking(c *model.Config, l *layout, ro role) int {
	switch {
	case ro.layers:
		return l.t*max(c.DModel, c.QDim(), c.FFN) + c.KVHeads*((c.HeadDim+15)&^15)*(l.pos0+l.t)
	case ro.head:
		return l.logitRows * c.DModel
	}
	return 0
}

// ErrOverBudget is wrapped by the error of a prefill whose capture plan
// needs more memory than its budget.
var ErrOverBudget = errors.New("capture over budget")

var errNoTokens = errors.New("engine: prefill of zero tokens: the prompt is empty")

// ErrCacheFull is wrapped by the error of a prefill whose tokens do not fit
// in the rest of the session's KV cache (at most the model's context).
var ErrCacheFull = errors.New("the KV cache is full")

func (s *Session) check(tokens []int32, o Options) (*layout, error) {
	c := &s.e.Model.Config
	if len(tokens) == 0 {
		return nil, errNoTokens
	}
	if err := s.e.Model.File.Changed(); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if pos := s.Pos(); pos+len(tokens) > s.capacity {
		if pos == 0 {
			return nil, fmt.Errorf("engine: the prompt is %d tokens, which exceed the KV cache of %d positions (the model's context is %d tokens): %w",
				len(tokens), s.capacity, c.Context, ErrCacheFull)
		}
		return nil, fmt.Errorf("engine: %d tokens at position %d exceed the KV cache of %d positions (%d left): %w",
			len(tokens), pos, s.capacity, s.capacity-pos, ErrCacheFull)
	}
	for i, id := range tokens {
		if id < 0 || int(id) >= c.Vocab {
			return nil, fmt.Errorf("engine: token %d at index %d is outside the vocabulary of %d (ids are 0..%d)", id, i, c.Vocab, c.Vocab-1)
		}
	}
	if err := o.Capture.Validate(c); err != nil {
		return nil, err
	}
	switch o.Logits {
	case LogitsLast, LogitsAll, LogitsNone:
	default:
		return nil, fmt.Errorf("engine: Options.Logits %d is not LogitsLast, LogitsAll or LogitsNone", o.Logits)
	}
	if o.Precision != PrecisionExact && o.Precision != PrecisionFast {
		return nil, fmt.Errorf("engine: Options.Precision %d is not PrecisionExact or PrecisionFast", int(o.Precision))
	}
	if o.Budget < 0 {
		return nil, fmt.Errorf("engine: Options.Budget %d is negative (0 means the default, %s)", o.Budget, human.Bytes(DefaultBudget))
	}
	for i := range o.Hooks {
		if err := o.Hooks[i].validate(c); err != nil {
			return nil, err
		}
	}
	l := newLayout(c, len(tokens), s.Pos(), o)
	// Scores are the one buffer of three sizes multiplied: bound it before
	// the int product can wrap (only contrived head counts get near).
	if keys := s.Pos() + len(tokens); l.anyMaterialized() && float64(c.Heads)*float64(len(tokens))*float64(keys) > 1<<46 {
		return nil, fmt.Errorf("engine: attention scores of %d heads x %d x %d positions are too large to materialise", c.Heads, len(tokens), keys)
	}
	budget := o.Budget
	if budget == 0 {
		budget = DefaultBudget
	}
	if need := 4 * int64(l.captureElements); need > budget {
		return nil, fmt.Errorf("engine: capture needs %s for %d points at T=%d, over the budget of %s (narrow the capture globs or layers, or raise Options.Budget): %w",
			human.Bytes(need), len(l.order), len(tokens), human.Bytes(budget), ErrOverBudget)
	}
	return l, nil
}

func attnScale(c *model.Config) float32 {
	if c.AttnScale != 0 {
		return c.AttnScale
	}
	return float32(1 / math.Sqrt(float64(c.HeadDim)))
}

// StopReason says why a generation ended.
type StopReason int

const (
	StopLength  StopReason = iota // it generated the tokens asked for
	StopEOS                       // the model predicted its end-of-sequence token
	StopContext                   // the session's KV cache (at most the model's context) is full
	StopError                     // an error ended it: cancellation, a device failure
)

func (r StopReason) String() string {
	switch r {
	case StopLength:
		return "length"
	case StopEOS:
		return "end of sequence"
	case StopContext:
		return "context full"
	case StopError:
		return "error"
	}
	return fmt.Sprintf("StopReason(%d)", int(r))
}

// Generation is what a generation produced and why it ended.
type Generation struct {
	Tokens []int32 // generated, without the end-of-sequence token
	Stop   StopReason
}

// GenerateOptions are how a generation runs, beyond its length.
type GenerateOptions struct {
	// Hooks intervene at every step: the prompt's prefill, then each new
	// token's, which has one row (position). PromptHooks intervene only in
	// the prompt's prefill: hooks at given rows of the prompt (AddVector with
	// positions, Patch) fit no later step.
	Hooks, PromptHooks []Hook
	// Sample draws each token; the zero Sampler is greedy.
	Sample    Sampler
	Precision Precision
}

// Generate continues the session greedily; GenerateWith says how.
func (s *Session) Generate(ctx context.Context, prompt []int32, n int) (Generation, error) {
	return s.GenerateWith(ctx, prompt, n, GenerateOptions{})
}

// GenerateWith continues the session: it prefills prompt at the session's
// position, then feeds back each token chosen (the most likely, or drawn by
// o.Sample), until it has n tokens, the model chooses the end-of-sequence
// token of its tokenizer, or the KV cache is full (the last token needs no
// room: a cache of C positions gives at most C-len(prompt)+1 tokens from
// position 0). A prompt that does not fit is an error wrapping ErrCacheFull,
// and bad options an error, before any work. An error part way (a cancelled
// ctx) returns the tokens generated so far, Stop set to StopError, and the
// error. The session is held for the whole call. The last token generated
// is not in the KV cache (nothing has followed it): a prefill that goes on
// from the generation starts with it.
func (s *Session) GenerateWith(ctx context.Context, prompt []int32, n int, o GenerateOptions) (Generation, error) {
	var g Generation
	if err := s.lock(); err != nil {
		g.Stop = StopError
		return g, err
	}
	defer s.unlock()
	if n < 0 {
		g.Stop = StopError
		return g, fmt.Errorf("engine: generate %d tokens: the count must not be negative", n)
	}
	if err := o.Sample.Check(); err != nil {
		g.Stop = StopError
		return g, err
	}
	eos := int32(-1)
	if tok := s.e.Model.Tok; tok != nil {
		eos = tok.EOS()
	}
	draws := o.Sample.Start()
	step := Options{Logits: LogitsLast, Predict: o.Sample.Greedy(), Precision: o.Precision,
		Hooks: append(slices.Clip(o.PromptHooks), o.Hooks...)}
	next := prompt
	for len(g.Tokens) < n {
		r, err := s.start(ctx, next, step)
		var tr *trace.Trace
		if err == nil {
			tr, err = r.finish()
		}
		if err != nil {
			g.Stop = StopError
			if len(g.Tokens) > 0 {
				hint := ""
				if len(o.Hooks) > 0 {
					hint = " (each step after the prompt has one row: a hook at given rows, or over all of them, belongs in PromptHooks)"
				}
				err = fmt.Errorf("engine: generating token %d (position %d): %w%s", len(g.Tokens)+1, s.Pos(), err, hint)
			}
			return g, err
		}
		step.Hooks = o.Hooks
		id, err := draws.Pick(tr)
		if errors.Is(err, ErrNaNLogits) {
			g.Stop = StopError
			return g, fmt.Errorf("engine: the logits for generated token %d hold NaN, so there is no next token: the model went non-finite (a trace with every point names where)", len(g.Tokens)+1)
		} else if err != nil {
			g.Stop = StopError
			return g, fmt.Errorf("engine: generated token %d: %w", len(g.Tokens)+1, err)
		}
		if id == eos {
			g.Stop = StopEOS
			return g, nil
		}
		g.Tokens = append(g.Tokens, id)
		if len(g.Tokens) < n && s.Pos() >= s.capacity {
			g.Stop = StopContext
			return g, nil
		}
		next = []int32{id}
	}
	g.Stop = StopLength
	return g, nil
}
