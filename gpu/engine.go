package gpu

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/stratalab/strata/gpu/trace"
	"github.com/stratalab/strata/model"
)

// Engine is a model made resident on a backend. It is safe for concurrent
// use by several sessions.
type Engine struct {
	Model   *model.Model
	Backend Backend
	embed   Matrix
	output  Matrix
	outNorm Tensor
	layers  []layerWeights
}

type layerWeights struct {
	attnNorm, ffnNorm   Tensor
	q, k, v, o          Matrix
	qBias, kBias, vBias Tensor
	qNorm, kNorm        Tensor
	gate, up, down      Matrix
}

// NewEngine uploads the model's weights to the backend once.
func NewEngine(m *model.Model, b Backend) (*Engine, error) {
	e := &Engine{Model: m, Backend: b}
	st := b.NewStream()
	defer st.Close()
	var err error
	upload := func(w *model.Weight) Matrix {
		if err != nil {
			return nil
		}
		var x Matrix
		x, err = b.Upload(w)
		return x
	}
	vector := func(name string, v []float32) Tensor {
		if err != nil || v == nil {
			return nil
		}
		var t Tensor
		if t, err = st.Alloc(name, len(v)); err == nil {
			st.Write(t, 0, v)
		}
		return t
	}
	e.embed = upload(m.Embed)
	e.output = e.embed
	if !m.TiedEmbd {
		e.output = upload(m.Output)
	}
	e.outNorm = vector("output_norm", m.OutNorm)
	e.layers = make([]layerWeights, len(m.Blocks))
	for i := range m.Blocks {
		l, w := &m.Blocks[i], &e.layers[i]
		name := func(s string) string { return fmt.Sprintf("blk.%d.%s", i, s) }
		w.attnNorm = vector(name("attn_norm"), l.AttnNorm)
		w.ffnNorm = vector(name("ffn_norm"), l.FFNNorm)
		w.q, w.k, w.v, w.o = upload(l.Q), upload(l.K), upload(l.V), upload(l.O)
		w.qBias = vector(name("attn_q.bias"), l.QBias)
		w.kBias = vector(name("attn_k.bias"), l.KBias)
		w.vBias = vector(name("attn_v.bias"), l.VBias)
		w.qNorm = vector(name("attn_q_norm"), l.QNorm)
		w.kNorm = vector(name("attn_k_norm"), l.KNorm)
		w.gate, w.up, w.down = upload(l.Gate), upload(l.Up), upload(l.Down)
	}
	if err == nil {
		err = st.Sync()
	}
	if err != nil {
		return nil, fmt.Errorf("engine: uploading %s to %s: %w", m.Name, b.Name(), err)
	}
	return e, nil
}

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
}

// Session is one conversation with an engine: a KV cache and a position.
// A session is used from one goroutine at a time.
type Session struct {
	e        *Engine
	st       Stream
	capacity int
	pos      int
	cacheK   []Tensor
	cacheV   []Tensor
	ws       workspace // the last prefill's buffers, for the next
	run      *Run      // the run holding ws, until it ends
}

// NewSession allocates a KV cache for capacity positions (0: the model's context length).
func (e *Engine) NewSession(capacity int) (*Session, error) {
	c := &e.Model.Config
	if capacity <= 0 {
		capacity = c.Context
	}
	if capacity > c.Context {
		return nil, fmt.Errorf("engine: KV cache of %d positions exceeds the model's context length %d", capacity, c.Context)
	}
	s := &Session{e: e, st: e.Backend.NewStream(), capacity: capacity}
	for l := 0; l < c.Layers; l++ {
		k, err := s.st.Alloc(fmt.Sprintf("blocks.%d.attn.cache_k", l), capacity*c.KVDim())
		if err != nil {
			s.Close()
			return nil, err
		}
		s.cacheK = append(s.cacheK, k)
		v, err := s.st.Alloc(fmt.Sprintf("blocks.%d.attn.cache_v", l), capacity*c.KVDim())
		if err != nil {
			s.Close()
			return nil, err
		}
		s.cacheV = append(s.cacheV, v)
	}
	return s, nil
}

// Close ends the session's unfinished run, if any, and frees the session's
// KV cache and prefill buffers.
func (s *Session) Close() {
	s.endRun(errSessionClosed)
	s.ws.free(s.st)
	for _, t := range append(s.cacheK, s.cacheV...) {
		s.st.Free(t)
	}
	s.cacheK, s.cacheV = nil, nil
	// Release the stream's own buffers now rather than when it is
	// collected; an error here belongs to work that is being thrown away.
	s.st.Close()
}

var errSessionClosed = errors.New("engine: the run's session was closed")

// endRun stops the run holding the session's buffers, if any, so that they
// can go to a new run or be freed; the run's calls then return why.
func (s *Session) endRun(why error) {
	if s.run != nil {
		s.run.fail(why)
		s.run.release()
	}
}

// Engine is the engine the session runs on.
func (s *Session) Engine() *Engine { return s.e }

// Pos is the position the next prefill starts at.
func (s *Session) Pos() int { return s.pos }

// Capacity is the KV cache's length in positions.
func (s *Session) Capacity() int { return s.capacity }

// Reset forgets the cached positions; the next prefill starts at 0.
func (s *Session) Reset() { s.pos = 0 }

// Rewind moves the position back to pos, as when a speculative draft is rejected.
func (s *Session) Rewind(pos int) error {
	if pos < 0 || pos > s.pos {
		return fmt.Errorf("engine: cannot rewind to position %d (session is at %d)", pos, s.pos)
	}
	s.pos = pos
	return nil
}

// Prefill runs tokens through every layer in one go.
func (s *Session) Prefill(ctx context.Context, tokens []int32, o Options) (*trace.Trace, error) {
	r, err := s.Start(ctx, tokens, o)
	if err != nil {
		return nil, err
	}
	return r.Finish()
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
// at most twice the size the next one needs.
func EstimateMemory(c *model.Config, t, pos0, capacity int, o Options) Estimate {
	l := newLayout(c, t, pos0, o)
	var est Estimate
	est.Scratch = 4 * int64(l.scratchElements(c))
	est.Capture = 4 * int64(l.captureElements)
	est.Cache = 4 * 2 * int64(c.Layers) * int64(capacity) * int64(c.KVDim())
	return est
}

// layout is the plan of one prefill's memory: the sizes of its scratch and
// where each captured point goes. Captured points are packed in program
// order into arenas, one per layer (and one each before and after the
// layers), split where one would pass arenaCap, so that a trace comes back
// in a few downloads and a step-wise run downloads each layer once.
type layout struct {
	t, pos0, keys, logitRows int
	materialize              []bool // per layer: scores and pattern needed
	slots                    map[string]slot
	order                    []string
	index                    map[string]int // every point's place in program order
	arenas                   []int          // each arena's size in elements
	captureElements          int
}

// arenaCap bounds an arena unless one point is larger: 128 MiB, the largest
// storage buffer every Vulkan device must support.
const arenaCap = 1 << 25

// slot is a captured point: its shape, and where it lies in which arena.
type slot struct {
	shape      []int
	arena, off int
}

func newLayout(c *model.Config, t, pos0 int, o Options) *layout {
	l := &layout{t: t, pos0: pos0, keys: pos0 + t, slots: map[string]slot{}, index: map[string]int{}}
	switch o.Logits {
	case LogitsLast:
		l.logitRows = 1
	case LogitsAll:
		l.logitRows = t
	}
	if l.logitRows == 0 && (o.Capture.Selects("ln_final.hook_normalized") || o.Capture.Selects("logits")) {
		l.logitRows = t
	}
	l.materialize = make([]bool, c.Layers)
	arenaLayer := 0
	for i, name := range Points(c.Layers) {
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
		// The points after the last layer, like those before the first, are in no layer.
		if layer < 0 && i > 0 {
			layer = c.Layers
		}
		if last := len(l.arenas) - 1; last < 0 || layer != arenaLayer || l.arenas[last]+n > arenaCap {
			l.arenas = append(l.arenas, 0)
			arenaLayer = layer
		}
		last := len(l.arenas) - 1
		l.slots[name] = slot{shape: shape, arena: last, off: l.arenas[last]}
		l.arenas[last] += n
		l.order = append(l.order, name)
		l.captureElements += n
	}
	return l
}

func (l *layout) anyMaterialized() bool {
	for _, m := range l.materialize {
		if m {
			return true
		}
	}
	return false
}

func (l *layout) scratchElements(c *model.Config) int {
	t := l.t
	n := 2*t*c.DModel + t*c.QDim() + 2*t*c.KVDim() + t*c.QDim() + 2*t*c.DModel + 2*t*c.FFN
	if l.anyMaterialized() {
		n += 2 * c.Heads * t * l.keys
	}
	if l.logitRows > 0 {
		n += l.logitRows*c.DModel + l.logitRows*c.Vocab + l.logitRows
	}
	return n
}

// ErrOverBudget is wrapped by the error of a prefill whose capture plan
// needs more memory than its budget.
var ErrOverBudget = errors.New("capture over budget")

var errNoTokens = errors.New("engine: prefill of zero tokens: the prompt is empty")

func (s *Session) check(tokens []int32, o Options) (*layout, error) {
	c := &s.e.Model.Config
	if len(tokens) == 0 {
		return nil, errNoTokens
	}
	if err := s.e.Model.File.Changed(); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if s.pos+len(tokens) > s.capacity {
		return nil, fmt.Errorf("engine: %d tokens at position %d exceed the KV cache of %d positions", len(tokens), s.pos, s.capacity)
	}
	for i, id := range tokens {
		if id < 0 || int(id) >= c.Vocab {
			return nil, fmt.Errorf("engine: token %d at index %d is outside the vocabulary of %d", id, i, c.Vocab)
		}
	}
	if err := o.Capture.Validate(c.Layers); err != nil {
		return nil, err
	}
	for _, h := range o.Hooks {
		if err := h.validate(c.Layers); err != nil {
			return nil, err
		}
	}
	l := newLayout(c, len(tokens), s.pos, o)
	budget := o.Budget
	if budget == 0 {
		budget = DefaultBudget
	}
	if need := 4 * int64(l.captureElements); need > budget {
		return nil, fmt.Errorf("engine: capture needs %s for %d points at T=%d, over the budget of %s (narrow the capture globs or layers, or raise Options.Budget): %w",
			HumanBytes(need), len(l.order), len(tokens), HumanBytes(budget), ErrOverBudget)
	}
	return l, nil
}

// HumanBytes writes a byte count with a binary unit, as errors and reports show it.
func HumanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func attnScale(c *model.Config) float32 { return float32(1 / math.Sqrt(float64(c.HeadDim))) }
