// Package nb is what notebooks import: open a model, prefill with captures
// and hooks, step through layers, and show figures, in calls that read well
// in a GoNB cell. It is a thin layer over model, gpu and viz; the same calls
// work outside a notebook, where Show writes files instead of displaying.
package nb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratalab/strata/backends"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/internal/human"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/tokenizer"
	"github.com/stratalab/strata/models"
	"github.com/stratalab/strata/trace"
)

// Model is a model made resident on a backend, with a session for
// incremental prefills.
//
// A Model is safe to share between goroutines (GoNB cells and user code
// start them freely): its calls take turns on its one session, each whole
// (a Generate runs to its end before another call starts). Continue and
// Start are step-wise state of that one session, so they mean "after the
// model's previous call", whichever goroutine made it: give each goroutine
// its own Model (or engine.Session) for concurrent conversations.
type Model struct {
	*engine.Engine
	// Note says which backend runs the model and why.
	Note string

	mu   sync.Mutex // serialises the calls that use sess
	sess *engine.Session
	// pending is the last token a generation chose, which a continuing
	// call runs first (under mu).
	pending []int32
	// inHost counts hooks' Host functions running in the call holding mu,
	// hostGoroutine is the goroutine running one (0: none).
	inHost        atomic.Int32
	hostGoroutine atomic.Uint64

	shared *sharedEngine // nil for a Model made by hand
	closed atomic.Bool
}

// sharedEngine is one engine that every open Model of the same file,
// backend and placement uses, each with its own session: a notebook that
// re-runs its open cell maps the file and uploads the weights once.
type sharedEngine struct {
	key  engineKey
	info os.FileInfo // the file's, to tell it from one replaced on disk
	e    *engine.Engine
	note string
	refs int // open Models using it, under enginesMu
}

type engineKey struct {
	path, backend, placement string
	size, mtime              int64
}

var (
	enginesMu sync.Mutex
	engines   = map[engineKey]*sharedEngine{}
)

var errClosed = errors.New("nb: the Model is closed")

// Close frees the Model's session and, when no other open Model shares it,
// its engine: the weights on every tier, the backends and the model file's
// mapping. It waits for a call in progress to end; later calls fail (or
// panic, as their kind does) with "the Model is closed", and traces it made
// on a GPU can no longer be read. Close again does nothing.
func (m *Model) Close() error {
	if m == nil || m.Engine == nil {
		return nil
	}
	if err := m.lock(); errors.Is(err, errClosed) {
		return nil
	} else if err != nil {
		return err
	}
	defer m.mu.Unlock()
	m.closed.Store(true)
	m.sess.Close()
	m.sess = nil
	if m.shared == nil {
		return nil
	}
	enginesMu.Lock()
	defer enginesMu.Unlock()
	if m.shared.refs--; m.shared.refs > 0 {
		return nil
	}
	if engines[m.shared.key] == m.shared {
		delete(engines, m.shared.key)
	}
	for _, b := range m.Tiers() {
		b.Close()
	}
	return m.Model.Close()
}

// hostWaitWarning is how long a call waits behind a Host function before
// saying that, made from that function, it waits forever.
var hostWaitWarning = 3 * time.Second

var errNilModel = errors.New("nb: nil *Model (Open failed, or the model was never opened)")

// ready panics with errNilModel on a model that was never opened.
func (m *Model) ready() {
	if m == nil || m.Engine == nil {
		panic(errNilModel)
	}
	if m.closed.Load() {
		panic(errClosed)
	}
}

// owns panics unless tr is a trace this model could have made: call's
// numbers would otherwise index another model's weights.
func (m *Model) owns(call string, tr *trace.Trace) {
	m.ready()
	if tr == nil {
		panic(fmt.Errorf("nb.%s of a nil trace", call))
	}
	if err := tr.Model.Matches(engine.TraceModel(&m.Model.Config)); err != nil {
		panic(fmt.Errorf("nb.%s: %w", call, err))
	}
}

// lock serialises a call on the model's session.
func (m *Model) lock() error {
	if m == nil || m.Engine == nil {
		return errNilModel
	}
	if m.mu.TryLock() {
		return m.unlessClosed()
	}
	if id := m.hostGoroutine.Load(); id != 0 && id == goroutineID() {
		return errors.New("nb: a hook's Host function called the Model that runs it: the model runs one call at a time, so this call would wait forever for the one running the hook")
	}
	// A Host function may have started a goroutine that made this call: it
	// would wait forever, and no Go runtime check says so.
	waited := make(chan struct{})
	defer close(waited)
	go func() {
		tick := time.NewTicker(hostWaitWarning)
		defer tick.Stop()
		for {
			select {
			case <-waited:
				return
			case <-tick.C:
				if m.inHost.Load() > 0 {
					fmt.Fprintln(os.Stderr, "nb: this call waits for the model, whose call in progress is in a hook's Host function: if the Host function made this call, it waits forever (a Host function must not call the Model that runs it)")
					return
				}
			}
		}
	}()
	m.mu.Lock()
	return m.unlessClosed()
}

// unlessClosed releases m.mu, which the caller took, if m is closed.
func (m *Model) unlessClosed() error {
	if m.closed.Load() {
		m.mu.Unlock()
		return errClosed
	}
	return nil
}

// goroutineID reads the running goroutine's number from its stack's first
// line ("goroutine 18 [running]:"): Go has no other way to tell that a
// call comes from a Host function on the goroutine of the call it hooks.
func goroutineID() uint64 {
	var buf [64]byte
	s := strings.TrimPrefix(string(buf[:runtime.Stack(buf[:], false)]), "goroutine ")
	id, _ := strconv.ParseUint(s[:max(strings.IndexByte(s, ' '), 0)], 10, 64)
	return id
}

// watchHosts counts the Host functions of hooks while they run, for lock.
func (m *Model) watchHosts(hooks []engine.Hook) []engine.Hook {
	hooks = slices.Clone(hooks)
	for i, h := range hooks {
		if host := h.Host; host != nil {
			hooks[i].Host = func(name string, shape []int, data []float32) error {
				m.inHost.Add(1)
				m.hostGoroutine.Store(goroutineID())
				defer func() {
					m.hostGoroutine.Store(0)
					m.inHost.Add(-1)
				}()
				return host(name, shape, data)
			}
		}
	}
	return hooks
}

// Open loads a GGUF model ("" for the embedded default model) on the best
// backend, or on the one named ("cpu", "vulkan", "auto").
func Open(path string, backend ...string) (*Model, error) {
	name := "auto"
	switch len(backend) {
	case 0:
	case 1:
		name = backend[0]
	default:
		return nil, fmt.Errorf("nb: open %q: one backend, not %d (%q): to split a model over devices, use OpenPlaced", path, len(backend), backend)
	}
	return OpenPlaced(path, name, "")
}

// OpenPlaced loads a model split over the backend's devices as tiers, as
// `strata run --placement` takes it: "0:0-13,1:14-27" puts layers 0-13 on
// device 0 and 14-27 on device 1 (a device named twice is two logical
// devices on it); "auto" plans from the devices' memory; "" is Open. Every
// call works across the tiers as on one device. A placement that does not
// hold the weights and a KV cache of the model's context is refused before
// anything is allocated, saying what is short where.
//
// Models of the same file, backend and placement share one engine (the
// weights, once), each with its own session; Close frees it with the last.
func OpenPlaced(path, backend, placement string) (*Model, error) {
	key := engineKey{path: path, backend: backend, placement: placement}
	var info os.FileInfo
	if path != "" {
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, err
		}
		st, err := os.Stat(abs)
		if err != nil {
			return nil, err
		}
		key.path, key.size, key.mtime = abs, st.Size(), st.ModTime().UnixNano()
		info = st
	}
	enginesMu.Lock()
	defer enginesMu.Unlock()
	shared := engines[key]
	if shared != nil && info != nil && !os.SameFile(shared.info, info) {
		shared = nil // another file of the same size and time: not shared
	}
	if shared == nil {
		var m *model.Model
		var err error
		if path == "" {
			m, err = models.Open()
		} else {
			m, err = model.Open(path)
		}
		if err != nil {
			return nil, err
		}
		e, note, err := backends.Engine(m, backend, placement, engine.PlanRequest{Capacity: m.Context, Tokens: 1})
		if err != nil {
			m.Close()
			if placement != "" {
				return nil, fmt.Errorf("nb: placement %q: %w", placement, err)
			}
			return nil, err
		}
		shared = &sharedEngine{key: key, info: info, e: e, note: note}
		if engines[key] == nil {
			engines[key] = shared
		}
	}
	shared.refs++
	return &Model{Engine: shared.e, Note: shared.note, shared: shared}, nil
}

// MustOpen is Open for notebook cells: it panics with the error.
func MustOpen(path string, backend ...string) *Model {
	m, err := Open(path, backend...)
	if err != nil {
		panic(err)
	}
	return m
}

// MustOpenPlaced is OpenPlaced for notebook cells: it panics with the error.
func MustOpenPlaced(path, backend, placement string) *Model {
	m, err := OpenPlaced(path, backend, placement)
	if err != nil {
		panic(err)
	}
	return m
}

// Option adjusts a prefill or a generation.
type Option func(*settings)

type settings struct {
	o        engine.Options
	cont     bool
	ctx      context.Context
	captured bool
	// For generation: which of o.Hooks act in the prompt's prefill only,
	// and how tokens are drawn.
	promptOnly []int
	sample     *engine.Sampler
	// Options a generation has no use for, by name.
	prefillOnly []string
}

// Capture keeps the points matching the globs, e.g.
// Capture("blocks.*.attn.hook_pattern", "blocks.*.hook_resid_post").
func Capture(globs ...string) Option {
	return func(s *settings) {
		s.o.Capture.Globs = append(s.o.Capture.Globs, globs...)
		s.captured = true
		s.prefillOnly = append(s.prefillOnly, "Capture")
	}
}

// Layers limits per-layer captures to layers first..last (last -1: the last
// layer); a range outside the model's layers, or selecting none, is refused.
func Layers(first, last int) Option {
	return func(s *settings) {
		s.o.Capture.FirstLayer, s.o.Capture.LastLayer = first, last
		s.prefillOnly = append(s.prefillOnly, "Layers")
	}
}

// Hooks intervenes during the prefill (engine.AblateHead, engine.Patch, ...), or
// at every step of a generation, each step seeing its own rows: after the
// prompt, one row, so a hook at given rows (engine.AddVector with positions,
// engine.Patch) or one that averages over rows (engine.MeanAblateHead) means
// something else there; give those as PromptHooks.
//
// A hook's Host function must not call the Model that runs it: the model
// runs one call at a time, so such a call is an error (a call from a
// goroutine the Host function starts would wait forever; after 3 s it says
// so on stderr). A Host function's panic is an error of the prefill.
func Hooks(h ...engine.Hook) Option { return func(s *settings) { s.o.Hooks = append(s.o.Hooks, h...) } }

// PromptHooks are Hooks that act in a generation's prompt only (in a
// prefill, everywhere, as Hooks).
func PromptHooks(h ...engine.Hook) Option {
	return func(s *settings) {
		for _, hook := range h {
			s.o.Hooks = append(s.o.Hooks, hook)
			s.promptOnly = append(s.promptOnly, len(s.o.Hooks)-1)
		}
	}
}

// AllLogits computes logits (and predictions) at every position, not only
// the last; so do the final norm's points (ln_final.*).
func AllLogits() Option {
	return func(s *settings) {
		s.o.Logits = engine.LogitsAll
		s.prefillOnly = append(s.prefillOnly, "AllLogits")
	}
}

// Budget bounds the capture's memory in bytes.
func Budget(bytes int64) Option {
	return func(s *settings) {
		s.o.Budget = bytes
		s.prefillOnly = append(s.prefillOnly, "Budget")
	}
}

// Sample makes Generate draw each token as sampler says (temperature,
// top-k, top-p, min-p, seed) instead of taking the most likely one.
func Sample(sampler engine.Sampler) Option { return func(s *settings) { s.sample = &sampler } }

// Fast runs the prefill's matrix products on float16 inputs
// (engine.PrecisionFast), on tensor cores for every weight format: on the
// H200 a bonsai-8b Q4_K prefill took 40% of the exact time, a 1-bit one
// 88%. Every point
// stays within about 1e-3 of its largest value in the exact run. The CPU
// backend, with AVX-512 VNNI, multiplies quantized weights with x rounded
// to int8 instead (2-3 times faster; points within about 1-3% of their
// largest value); float weights stay float32 there.
func Fast() Option { return func(s *settings) { s.o.Precision = engine.PrecisionFast } }

// Continue appends to the previous prefill's KV cache instead of starting
// over; text is tokenized as it continues the tokens before (no BOS).
func Continue() Option { return func(s *settings) { s.cont = true } }

// Context lets a prefill be cancelled.
func Context(ctx context.Context) Option { return func(s *settings) { s.ctx = ctx } }

// forPrefill refuses options only a generation has a use for.
func (s *settings) forPrefill() error {
	if s.sample != nil {
		return errors.New("nb: Sample draws the tokens Generate adds; a prefill adds none (its trace's Predicted are the most likely, its logits the whole distribution)")
	}
	return nil
}

func (s *settings) generateOptions() engine.GenerateOptions {
	g := engine.GenerateOptions{Precision: s.o.Precision}
	if s.sample != nil {
		g.Sample = *s.sample
	}
	for i, h := range s.o.Hooks {
		if slices.Contains(s.promptOnly, i) {
			g.PromptHooks = append(g.PromptHooks, h)
		} else {
			g.Hooks = append(g.Hooks, h)
		}
	}
	return g
}

func (m *Model) settings(opts []Option) *settings {
	s := &settings{ctx: context.Background()}
	s.o.Capture.LastLayer = -1
	s.o.Predict = true
	for _, o := range opts {
		o(s)
	}
	if !s.captured {
		s.o.Capture.Globs = nil
	}
	s.o.Hooks = m.watchHosts(s.o.Hooks)
	return s
}

// Tokens encodes text as the model's tokenizer does for a prompt (BOS per
// its metadata); it panics on text the tokenizer cannot represent.
func (m *Model) Tokens(text string) []int32 {
	m.ready()
	ids, err := m.Model.Tok.Encode(text, tokenizer.Options{})
	if err != nil {
		panic(err)
	}
	return ids
}

// Pieces are the display strings of ids (TransformerLens's
// to_str_tokens); Quote prints them so that a leading space shows.
func (m *Model) Pieces(ids []int32) []string {
	m.ready()
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = m.Model.Tok.Piece(id)
	}
	return out
}

// Quote lists pieces (m.Pieces) in quotes, as Python prints
// to_str_tokens: ["<|endoftext|>" "func" " ("].
func Quote(pieces []string) string { return quotePieces(pieces) }

func (m *Model) tokens(prompt any) ([]int32, error) {
	switch p := prompt.(type) {
	case string:
		return m.Model.Tok.Encode(p, tokenizer.Options{})
	case []int32:
		return p, nil
	case []int:
		// Checked here, before the conversion to int32 can wrap an id
		// into the vocabulary.
		ids := make([]int32, len(p))
		for i, v := range p {
			if v < 0 || v >= m.Model.Vocab {
				return nil, fmt.Errorf("nb: token %d at index %d is outside the vocabulary of %d (ids are 0..%d)", v, i, m.Model.Vocab, m.Model.Vocab-1)
			}
			ids[i] = int32(v)
		}
		return ids, nil
	}
	return nil, fmt.Errorf("nb: a prompt is a string or token ids ([]int32 or []int), not %T", prompt)
}

// promptTokens is tokens, with text that continues the session's tokens
// encoded as part of them: without a BOS, and without the space prefix a
// SentencePiece tokenizer puts at the start of a prompt; after a
// generation, its last token (not in the cache yet) first. m.mu is held.
func (m *Model) promptTokens(prompt any, cont bool) ([]int32, error) {
	pending := m.pending
	m.pending = nil
	var ids []int32
	var err error
	if text, ok := prompt.(string); ok && cont && m.sess != nil && m.sess.Pos() > 0 {
		ids, err = m.Model.Tok.Encode(text, tokenizer.Options{Continue: true})
	} else {
		ids, err = m.tokens(prompt)
	}
	if !cont || err != nil {
		return ids, err
	}
	return append(slices.Clip(pending), ids...), nil
}

// session returns the model's session, fresh unless continuing, with room
// for need more positions where the context allows (past it, the call's
// own error says so), for a prefill of t tokens with options o; m.mu is
// held. The KV cache starts small and grows: one of a long context
// (a 32k-token 8B model's is 10 GB) would take the device's memory for a
// short prompt. On the CPU a call that would not fit the host's memory is
// refused first.
func (m *Model) session(cont bool, need, t int, o engine.Options) (*engine.Session, error) {
	limit := m.Model.Context
	if err := m.hostFits(cont, need, t, o); err != nil {
		return nil, err
	}
	if m.sess == nil {
		s, err := m.NewSession(min(limit, max(need, minCache)))
		if err != nil {
			return nil, err
		}
		m.sess = s
	}
	if !cont {
		if err := m.sess.Reset(); err != nil {
			return nil, err
		}
	}
	if want := min(limit, m.sess.Pos()+need); want > m.sess.Capacity() {
		if err := m.sess.Grow(min(limit, max(want, 2*m.sess.Capacity()))); err != nil {
			return nil, err
		}
	}
	return m.sess, nil
}

// hostAvailable is backends.HostAvailable; tests make the host small.
var hostAvailable = backends.HostAvailable

// hostFits refuses, on the CPU, a prefill of t tokens, in a cache with room
// for need more positions, whose buffers
// (engine.EstimateMemory) do not fit the host memory left: past it the Go
// runtime dies with "fatal error: out of memory" (under ulimit -v, a long
// prefill did) rather than fail. m.mu is held.
func (m *Model) hostFits(cont bool, need, t int, o engine.Options) error {
	if !backends.OnHost(m.Engine) {
		return nil
	}
	avail, err := hostAvailable()
	if err != nil {
		return nil // not known here: nothing to check against
	}
	c := &m.Model.Config
	pos, capacity := 0, min(c.Context, max(need, minCache))
	if m.sess != nil {
		if cont {
			pos = m.sess.Pos()
		}
		capacity = max(m.sess.Capacity(), min(c.Context, pos+need))
	}
	est := engine.EstimateMemory(c, min(t, c.Context), pos, capacity, o)
	needed, cache := est.Total(), "KV cache "+human.Bytes(est.Cache)
	if m.sess != nil && capacity == m.sess.Capacity() {
		needed, cache = needed-est.Cache, "the KV cache is held already"
	}
	if needed > avail {
		return fmt.Errorf("nb: this call needs about %s more of host memory (scratch %s, capture %s, %s), and %s is left: use a shorter prompt or fewer captures",
			human.Bytes(needed), human.Bytes(est.Scratch), human.Bytes(est.Capture), cache, human.Bytes(avail))
	}
	return nil
}

// minCache is the positions a model's first KV cache holds at least.
const minCache = 2048

// FreeSpare lets go of what the model's closed traces left for its next
// ones on a GPU: their device memory, and the host memory their captures
// were read into. A sweep wants it kept; call this after closing a large
// trace when none follows. (A CPU backend keeps closed traces' memory for
// as long as the collector lets it, on its own.)
func (m *Model) FreeSpare() {
	if m.lock() != nil {
		return
	}
	defer m.mu.Unlock()
	m.sess.FreeSpare()
}

// Try runs a prefill and returns its trace or an error.
func (m *Model) Try(prompt any, opts ...Option) (*trace.Trace, error) {
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	return m.try(prompt, opts...)
}

func (m *Model) try(prompt any, opts ...Option) (*trace.Trace, error) {
	s := m.settings(opts)
	if err := s.forPrefill(); err != nil {
		return nil, err
	}
	ids, err := m.promptTokens(prompt, s.cont)
	if err != nil {
		return nil, err
	}
	sess, err := m.session(s.cont, len(ids), len(ids), s.o)
	if err != nil {
		return nil, err
	}
	return sess.Prefill(s.ctx, ids, s.o)
}

// Prefill runs the prompt (text or token ids) through every layer and
// returns what was captured, with tr.Predicted the most likely next token
// at each position; it panics with the error, as notebook cells want.
func (m *Model) Prefill(prompt any, opts ...Option) *trace.Trace {
	tr, err := m.Try(prompt, opts...)
	if err != nil {
		panic(err)
	}
	return tr
}

// Generate continues text by up to n tokens, greedily unless Sample says
// otherwise, and returns the continuation. It stops early at the
// end-of-sequence token or when the context is full; TryGenerate says which.
// It panics on an error.
func (m *Model) Generate(text string, n int, opts ...Option) string {
	g, err := m.TryGenerate(text, n, opts...)
	if err != nil {
		panic(err)
	}
	return g.Text
}

// Generated is a continuation and why it ended.
type Generated struct {
	Text   string  // the generated tokens, decoded
	Tokens []int32 // without the end-of-sequence token
	// Stop is why it ended: engine.StopLength (n tokens), engine.StopEOS,
	// engine.StopContext (the model's context is full) or engine.StopError.
	Stop engine.StopReason
}

// TryGenerate continues the prompt (text or token ids) by up to n tokens,
// from a fresh cache (or after the previous call with Continue()): the most
// likely token at each step, or one drawn as Sample says. Hooks act at every
// step (the prompt, then each new token's one row); PromptHooks, and Steer
// at given positions, act in the prompt's prefill only, before the other
// hooks; Steer without positions adds at every position, generated ones
// included. Fast and
// Context apply too; options that only a prefill has a use for (Capture,
// AllLogits, Layers, Budget) are an error. Reaching the end of the context
// is not an error: it returns what was generated with Stop
// engine.StopContext. On an error part way (a cancelled Context) it returns
// what was generated so far and the error.
func (m *Model) TryGenerate(prompt any, n int, opts ...Option) (Generated, error) {
	if err := m.lock(); err != nil {
		return Generated{Stop: engine.StopError}, err
	}
	defer m.mu.Unlock()
	s := m.settings(opts)
	if len(s.prefillOnly) > 0 {
		return Generated{Stop: engine.StopError}, fmt.Errorf("nb: Generate has no use for %s: it captures nothing and computes only the last position's logits (Prefill the generated text to look inside)", strings.Join(slices.Compact(slices.Sorted(slices.Values(s.prefillOnly))), ", "))
	}
	ids, err := m.promptTokens(prompt, s.cont)
	if err != nil {
		return Generated{Stop: engine.StopError}, err
	}
	sess, err := m.session(s.cont, len(ids)+max(n, 0), len(ids), engine.Options{Precision: s.o.Precision})
	if err != nil {
		return Generated{Stop: engine.StopError}, err
	}
	g, err := sess.GenerateWith(s.ctx, ids, n, s.generateOptions())
	if len(g.Tokens) > 0 && g.Stop != engine.StopEOS {
		m.pending = g.Tokens[len(g.Tokens)-1:] // chosen, not yet run: see promptTokens
	}
	out := Generated{Tokens: g.Tokens, Stop: g.Stop}
	text, derr := m.Model.Tok.Decode(g.Tokens)
	out.Text = text
	if err == nil {
		err = derr
	}
	return out, err
}

// Lens adds the logit lens to a trace that captured every layer's
// resid_post: row l is after layer l, each normalised by the final norm
// with its own scale (the embedding is not a row). AccumulatedResid(tr,
// true) differs on both counts, as TransformerLens's does: row l is before
// layer l, and every row takes the scale of the final residual.
func (m *Model) Lens(tr *trace.Trace) *trace.Trace {
	m.owns("Lens", tr)
	if err := m.LogitLens(tr); err != nil {
		panic(err)
	}
	return tr
}

// Steps is a prefill advanced a layer at a time.
type Steps struct {
	m *Model
	r *engine.Run
}

// Start begins a step-wise prefill; call Next to advance a layer. The
// model's next prefill (or Start) ends it: the steps share its buffers.
// Without Capture it captures every point (of the Layers given).
func (m *Model) Start(prompt any, opts ...Option) *Steps {
	if err := m.lock(); err != nil {
		panic(err)
	}
	defer m.mu.Unlock()
	s := m.settings(opts)
	if err := s.forPrefill(); err != nil {
		panic(err)
	}
	ids, err := m.promptTokens(prompt, s.cont)
	if err != nil {
		panic(err)
	}
	if !s.captured {
		s.o.Capture.Globs = []string{"*"}
	}
	sess, err := m.session(s.cont, len(ids), len(ids), s.o)
	if err != nil {
		panic(err)
	}
	r, err := sess.Start(s.ctx, ids, s.o)
	if err != nil {
		panic(err)
	}
	return &Steps{m: m, r: r}
}

// do runs f on the steps' run with the model's session to itself.
func (s *Steps) do(f func(r *engine.Run)) {
	if s == nil || s.r == nil {
		panic(errors.New("nb: nil *Steps (use Model.Start)"))
	}
	if err := s.m.lock(); err != nil {
		panic(err)
	}
	defer s.m.mu.Unlock()
	f(s.r)
}

// Next runs the next layer; false once every layer has run.
func (s *Steps) Next() (more bool) {
	s.do(func(r *engine.Run) { more = r.Next() })
	return more
}

// Err is why the steps stopped early (nil when every layer ran), e.g. the
// model's next prefill took the steps' buffers.
func (s *Steps) Err() (err error) {
	s.do(func(r *engine.Run) { err = r.Err() })
	return err
}

// Layer is the layer that ran last (-1 before the first), the last one
// after the steps have run out or finished.
func (s *Steps) Layer() (l int) {
	s.do(func(r *engine.Run) { l = r.Layer() })
	return l
}

// To runs until the named point, e.g. "blocks.2.attn.hook_pattern"; a point
// already passed panics at once (a run goes forward only).
func (s *Steps) To(point string) *Steps {
	var err error
	s.do(func(r *engine.Run) { err = r.RunTo(point) })
	if err != nil {
		panic(err)
	}
	return s
}

// Trace is what has been captured so far.
func (s *Steps) Trace() *trace.Trace {
	var tr *trace.Trace
	var err error
	s.do(func(r *engine.Run) { tr, err = r.Trace() })
	if err != nil {
		panic(err)
	}
	return tr
}

// Finish runs the rest and returns the whole trace.
func (s *Steps) Finish() *trace.Trace {
	var tr *trace.Trace
	var err error
	s.do(func(r *engine.Run) { tr, err = r.Finish() })
	if err != nil {
		panic(err)
	}
	return tr
}
