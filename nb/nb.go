// Package nb is what notebooks import: open a model, prefill with captures
// and hooks, step through layers, run the analyses of interpretability
// (head scores, direct logit attribution, the logit lens, ablation,
// activation patching, circuits) and show figures, in calls that read well
// in a GoNB cell. It is a thin layer over model, engine, trace and viz; the
// same calls work outside a notebook, where Show writes files instead of
// displaying. docs/TRANSFORMERLENS.md puts TransformerLens's calls beside
// these.
//
// # Conventions
//
// Prompts: every call that takes a prompt takes it as any: text (encoded
// with the tokenizer's BOS), or token ids, []int32 or []int (taken as they
// are). A batch (PrefillBatch) is a []string, []any of prompts, [][]int32
// or [][]int, and comes back as a trace per prompt. A token (Token, Unembed, LogitDirection, LogitDiff, TokenLens, WE,
// WU) is text of one token, an int or an int32. Token ids are int32, as
// tokenizers and traces hold them; positions, layers and heads are int.
//
// Errors: nb's calls panic with the error, which a notebook cell shows;
// the few a program recovers from have a Try form that returns it instead
// (TryOpen, TryPrefill, TryPrefillBatch, TryGenerate, TryStart). trace and viz return
// errors: nb.Must(v, err) makes one a panic in a cell, and Show takes a
// figure call's (figure, error) as it is. Steps.Err returns the error that
// stopped the steps.
//
// Positions: pos is a position of the trace or prompt, from 0; a negative
// one counts from the end (-1 is the last), everywhere: DLA, HeadDLA,
// NeuronDLA, LensTop, TopTokens, SteeringVector, Steer, PatchHead, HeadAt,
// MeanLoss.
//
// Results: one value per head is a trace.Scores, [layer][head], with Top,
// Bottom, Ranked and Best (HeadScores, HeadDLA, AblateHeads,
// CompositionScores, CopyingScores); per MLP neuron, NeuronScores, with the
// same methods. Every patching sweep returns a *Patching: the patched
// metric as a trace.Scores ([layer][head] or [layer][position]), the clean
// and corrupted metrics, and Normalized(), 0 where a patch does nothing and
// 1 where it restores the clean run. AblateHeads is ablated minus plain
// (negative where a head helps the metric).
//
// Argument order: what the call acts on comes first, options last. An
// analysis takes the trace first (m.DLA(tr, dir, pos)); a sweep the
// prompt(s), then the metric, then what it varies
// (m.AblateHeads(prompt, metric, how), m.PatchPositions(clean, corrupt,
// metric, point)); a hook or head the place first (engine.PatchHead(layer,
// head, from), Steer(layer, vec, alpha), m.CompositionScores(layer, head, kind)).
// viz's figures take their data first and the title (then axis labels)
// last: viz.Heatmap(z, rows, cols, title), viz.XY(x, y, title, xLabel,
// yLabel).
//
// Options: every call that runs a prefill takes ...PrefillOption, Generate
// ...GenerateOption, Open ...OpenOption (Backend, Placement). An Option
// (Hooks, Steer, Fast, Context, Continue) serves both; a PrefillOnly
// (Capture, AllLogits, Layers, Budget) a prefill alone and a GenerateOnly
// (Sample) a generation alone, so that giving one to the other does not
// compile.
//
// # GoNB cells
//
// GoNB runs each cell as a new program built from every declaration made so
// far (globals, functions, types) and the cell's body (after %%): nothing in
// memory outlives a cell, and a global var is evaluated again in every cell.
// So var m = nb.Open("") in a notebook's first cell, as Strata's notebooks
// have it, opens the model once per cell run: for the default model, a
// memory map, 3 ms on the CPU backend (about 50 ms with "auto", which
// probes for a Vulkan GPU first). A large model on a GPU takes seconds: open
// it in the bodies of the cells that use it (m := nb.Open(path)). Keep
// what a later cell needs as a declaration (a const prompt, a func), or on
// disk: Trace.Save and trace.Load, or GoNB's cache.Cache for a result gob
// encodes (trace.Scores, a *Patching). A declaration that does not compile
// breaks every later cell with only "exit status 1": GoNB keeps it until
// it is redefined or removed (%rm name).
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

	"github.com/stratalab/strata/backend"
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
	eng atomic.Pointer[engine.Engine] // nil once closed
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

// hostWaitWarning is how long a call waits behind a Host function before
// saying that, made from that function, it waits forever.
var hostWaitWarning = 3 * time.Second

var (
	errNilModel    = errors.New("nb: nil *Model (Open failed, or the model was never opened)")
	errClosedModel = errors.New("nb: the Model is closed (or was never opened with nb.Open)")
)

// ready panics unless the model is open.
func (m *Model) ready() {
	if err := m.usable(); err != nil {
		panic(err)
	}
}

// engine is the model's engine; it panics (nb's error) once the model is
// closed. Calls that read weights on the host take it without the lock, so
// Close only swaps the pointer: a call under way keeps the engine it took.
func (m *Model) engine() *engine.Engine {
	if m == nil {
		panic(errNilModel)
	}
	if e := m.eng.Load(); e != nil {
		return e
	}
	panic(errClosedModel)
}

// usable is why the model cannot be used, or nil.
func (m *Model) usable() error {
	switch {
	case m == nil:
		return errNilModel
	case m.eng.Load() == nil:
		return errClosedModel
	}
	return nil
}

// Engine is the engine that runs the model, for what nb does not wrap
// (sessions of one's own, the logit lens on a trace as an error).
func (m *Model) Engine() *engine.Engine { return m.engine() }

// Config is the model's configuration: layers, heads, d_model, vocabulary...
func (m *Model) Config() model.Config {
	m.ready()
	return m.engine().Model.Config
}

// Close releases the model: its session's KV cache and, when no other open
// Model of the same file, backend and placement shares it, its engine (the
// backends' device memory and the model file's mapping). Every later call
// is an error, and traces it made on a GPU can no longer be read; a prefill
// or generation in progress ends first. A call reading weights on the host
// (Unembed, WE, HeadWeights, CopyingScores, the DLA family) is not waited
// for (it may run in a hook): it keeps the engine it took, each weight it
// has begun to read stays mapped until read, and one it would read after
// the close is the closed model's error. Closing twice,
// or a nil model, does nothing; a hook's Host function closing the model
// that runs it is an error.
func (m *Model) Close() error {
	if err := m.lock(); err != nil {
		if err == errNilModel || err == errClosedModel {
			return nil
		}
		return err // called from a hook's Host function
	}
	defer m.mu.Unlock()
	if m.sess != nil {
		m.sess.Close()
		m.sess = nil
	}
	e, shared := m.eng.Load(), m.shared
	m.eng.Store(nil)
	if shared != nil {
		enginesMu.Lock()
		defer enginesMu.Unlock()
		if shared.refs--; shared.refs > 0 {
			return nil
		}
		if engines[shared.key] == shared {
			delete(engines, shared.key)
		}
	}
	var errs []error
	var closed []backend.Backend // tiers may share a backend
	for _, b := range e.Tiers() {
		if !slices.Contains(closed, b) {
			closed = append(closed, b)
			errs = append(errs, b.Close())
		}
	}
	errs = append(errs, e.Model.Close())
	return errors.Join(errs...)
}

// owns panics unless tr is a trace this model could have made: call's
// numbers would otherwise index another model's weights.
func (m *Model) owns(call string, tr *trace.Trace) {
	m.ready()
	if tr == nil {
		panic(fmt.Errorf("nb.%s of a nil trace", call))
	}
	if err := tr.Model.Matches(engine.TraceModel(&m.engine().Model.Config)); err != nil {
		panic(fmt.Errorf("nb.%s: %w", call, err))
	}
}

// lock serialises a call on the model's session.
func (m *Model) lock() error {
	if m == nil {
		return errNilModel
	}
	if !m.mu.TryLock() {
		if err := m.wait(); err != nil {
			return err
		}
	}
	if m.eng.Load() == nil {
		m.mu.Unlock()
		return errClosedModel
	}
	return nil
}

// wait takes m.mu, which another call holds. A call made by a hook's Host
// function, on the goroutine of the call that runs the hook, would wait
// for ever: it is an error instead.
func (m *Model) wait() error {
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

// OpenOption adjusts how Open loads a model.
type OpenOption func(*openSettings)

type openSettings struct {
	backends  []string
	placement string
}

// Backend names the backend to run on: "cpu", "vulkan" or "auto" (the
// default: a Vulkan GPU when there is one). One model runs on one backend:
// Open refuses two.
func Backend(name string) OpenOption {
	return func(o *openSettings) { o.backends = append(o.backends, name) }
}

// Placement splits the model over the backend's devices as tiers, as
// `strata run --placement` takes it: "0:0-13,1:14-27" puts layers 0-13 on
// device 0 and 14-27 on device 1 (a device named twice is two logical
// devices on it); "auto" plans from the devices' memory. Every call works
// across the tiers as on one device. A placement that does not hold the
// weights and a KV cache of the model's context is refused before anything
// is allocated, saying what is short where.
func Placement(spec string) OpenOption { return func(o *openSettings) { o.placement = spec } }

// Open loads a GGUF model ("" for the embedded default model), on the best
// backend unless Backend says which; it panics with the error. In GoNB
// it runs again in every cell: "GoNB cells" in the package doc says what
// that costs.
func Open(path string, opts ...OpenOption) *Model {
	m, err := TryOpen(path, opts...)
	if err != nil {
		panic(err)
	}
	return m
}

// TryOpen is Open returning the error.
func TryOpen(path string, opts ...OpenOption) (*Model, error) {
	var o openSettings
	for _, opt := range opts {
		opt(&o)
	}
	backend := "auto"
	switch len(o.backends) {
	case 0:
	case 1:
		backend = o.backends[0]
	default:
		return nil, fmt.Errorf("nb: open %q: one backend, not %d (%q): to split a model over devices, use Placement", path, len(o.backends), o.backends)
	}
	key := engineKey{path: path, backend: backend, placement: o.placement}
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
		e, note, err := backends.Engine(m, backend, o.placement, engine.PlanRequest{Capacity: m.Context, Tokens: 1})
		if err != nil {
			m.Close()
			if o.placement != "" {
				return nil, fmt.Errorf("nb: placement %q: %w", o.placement, err)
			}
			return nil, err
		}
		shared = &sharedEngine{key: key, info: info, e: e, note: note}
		if engines[key] == nil {
			engines[key] = shared
		}
	}
	shared.refs++
	m := &Model{Note: shared.note, shared: shared}
	m.eng.Store(shared.e)
	return m, nil
}

// Option adjusts a prefill or a generation alike: Hooks, PromptHooks,
// Steer, Fast, Continue, Context.
type Option func(*settings)

// PrefillOnly adjusts what a prefill captures and computes: Capture,
// Layers, AllLogits, Budget, CaptureDLA, CaptureNeuronDLA. Generate takes
// none (it captures nothing and computes the last position's logits only:
// prefill the generated text to look inside).
type PrefillOnly func(*settings)

// GenerateOnly adjusts how a generation draws its tokens: Sample. A
// prefill takes none (its trace's Predicted are the most likely tokens, its
// logits the whole distribution).
type GenerateOnly func(*settings)

// PrefillOption is what Prefill, Start and every call that runs a prefill
// take: an Option or a PrefillOnly.
type PrefillOption interface{ applyPrefill(*settings) }

// GenerateOption is what Generate takes: an Option or a GenerateOnly.
type GenerateOption interface{ applyGenerate(*settings) }

func (o Option) applyPrefill(s *settings)        { o(s) }
func (o Option) applyGenerate(s *settings)       { o(s) }
func (o PrefillOnly) applyPrefill(s *settings)   { o(s) }
func (o GenerateOnly) applyGenerate(s *settings) { o(s) }

type settings struct {
	o        engine.Options
	cont     bool
	ctx      context.Context
	captured bool
	// For generation: which of o.Hooks act in the prompt's prefill only,
	// and how tokens are drawn.
	promptOnly []int
	sample     *engine.Sampler
}

// Capture keeps the points matching the globs, e.g.
// Capture("blocks.*.attn.hook_pattern", "blocks.*.hook_resid_post");
// Capture("*") keeps every point, as TransformerLens's run_with_cache does.
func Capture(globs ...string) PrefillOnly {
	return func(s *settings) {
		s.o.Capture.Globs = append(s.o.Capture.Globs, globs...)
		s.captured = true
	}
}

// Layers limits per-layer captures to layers first..last (last -1: the last
// layer); a range outside the model's layers, or selecting none, is refused.
func Layers(first, last int) PrefillOnly {
	return func(s *settings) {
		s.o.Capture.FirstLayer, s.o.Capture.LastLayer = first, last
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
func AllLogits() PrefillOnly {
	return func(s *settings) {
		s.o.Logits = engine.LogitsAll
	}
}

// Budget bounds the capture's memory in bytes.
func Budget(bytes int64) PrefillOnly {
	return func(s *settings) {
		s.o.Budget = bytes
	}
}

// Sample makes Generate draw each token as sampler says (temperature,
// top-k, top-p, min-p, seed) instead of taking the most likely one.
func Sample(sampler engine.Sampler) GenerateOnly { return func(s *settings) { s.sample = &sampler } }

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

// prefillSettings are the settings opts make for a prefill.
func (m *Model) prefillSettings(opts []PrefillOption) *settings {
	s := newSettings()
	for _, o := range opts {
		o.applyPrefill(s)
	}
	return m.finish(s)
}

// generateSettings are the settings opts make for a generation.
func (m *Model) generateSettings(opts []GenerateOption) *settings {
	s := newSettings()
	for _, o := range opts {
		o.applyGenerate(s)
	}
	return m.finish(s)
}

func newSettings() *settings {
	s := &settings{ctx: context.Background()}
	s.o.Capture.LastLayer = -1
	s.o.Predict = true
	return s
}

func (m *Model) finish(s *settings) *settings {
	if !s.captured {
		s.o.Capture.Globs = nil
	}
	s.o.Hooks = m.watchHosts(s.o.Hooks)
	return s
}

// Tokens are the ids of a prompt: text encoded as the model's tokenizer
// does for a prompt (BOS per its metadata; TransformerLens's to_tokens), or
// ids checked against the vocabulary. It panics on text the tokenizer
// cannot represent.
func (m *Model) Tokens(prompt any) []int32 {
	m.ready()
	return Must(m.tokens(prompt))
}

// ToString decodes ids to the text they stand for (TransformerLens's
// to_string), as llama.cpp does with special tokens not rendered: the BOS
// and other control tokens give nothing, so ToString(Tokens(text)) is text.
func (m *Model) ToString(ids []int32) string {
	m.ready()
	for i, id := range ids {
		if id < 0 || int(id) >= m.engine().Model.Vocab {
			panic(fmt.Errorf("nb.ToString: token %d at index %d is outside the vocabulary of %d", id, i, m.engine().Model.Vocab))
		}
	}
	return Must(m.engine().Model.Tok.Decode(ids))
}

// Pieces are the display strings of ids (TransformerLens's
// to_str_tokens); Quote prints them so that a leading space shows.
func (m *Model) Pieces(ids []int32) []string {
	m.ready()
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = m.engine().Model.Tok.Piece(id)
	}
	return out
}

// Quote lists pieces (m.Pieces) in quotes, as Python prints
// to_str_tokens: ["<|endoftext|>" "func" " ("].
func Quote(pieces []string) string { return quotePieces(pieces) }

// Repr quotes a piece (m.Pieces) as Python's repr prints a string, so
// that a leading space shows: ' err', "'s". A piece's escapes (\n, \t,
// \\) are already written, as repr writes them.
func Repr(piece string) string {
	if strings.Contains(piece, "'") && !strings.Contains(piece, `"`) {
		return `"` + piece + `"`
	}
	return "'" + strings.ReplaceAll(piece, "'", `\'`) + "'"
}

func (m *Model) tokens(prompt any) ([]int32, error) {
	switch p := prompt.(type) {
	case string:
		return m.engine().Model.Tok.Encode(p, tokenizer.Options{})
	case []int32:
		return p, nil
	case []int:
		// Checked here, before the conversion to int32 can wrap an id
		// into the vocabulary.
		ids := make([]int32, len(p))
		for i, v := range p {
			if v < 0 || v >= m.engine().Model.Vocab {
				return nil, fmt.Errorf("nb: token %d at index %d is outside the vocabulary of %d (ids are 0..%d)", v, i, m.engine().Model.Vocab, m.engine().Model.Vocab-1)
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
		ids, err = m.engine().Model.Tok.Encode(text, tokenizer.Options{Continue: true})
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
	limit := m.engine().Model.Context
	if err := m.hostFits(cont, need, t, o); err != nil {
		return nil, err
	}
	if m.sess == nil {
		s, err := m.engine().NewSession(min(limit, max(need, minCache)))
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
	if !backends.OnHost(m.engine()) {
		return nil
	}
	avail, err := hostAvailable()
	if err != nil {
		return nil // not known here: nothing to check against
	}
	c := &m.engine().Model.Config
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

// TryPrefill is Prefill returning the error.
func (m *Model) TryPrefill(prompt any, opts ...PrefillOption) (*trace.Trace, error) {
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	return m.try(prompt, opts...)
}

func (m *Model) try(prompt any, opts ...PrefillOption) (*trace.Trace, error) {
	s := m.prefillSettings(opts)
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
func (m *Model) Prefill(prompt any, opts ...PrefillOption) *trace.Trace {
	tr, err := m.TryPrefill(prompt, opts...)
	if err != nil {
		panic(err)
	}
	return tr
}

// Generate continues the prompt (text or token ids) by up to n tokens,
// from a fresh cache (or after the previous call with Continue()): the most
// likely token at each step, or one drawn as Sample says. It stops early at
// the end-of-sequence token or when the context is full (Stop says which),
// and panics on an error. Hooks act at every step (the prompt, then each new
// token's one row); PromptHooks, and Steer at given positions, act in the
// prompt's prefill only, before the other hooks; Steer without positions
// adds at every position, generated ones included. Fast and Context apply
// too; options that only a prefill has a use for (PrefillOnly: Capture,
// AllLogits, Layers, Budget) do not compile.
func (m *Model) Generate(prompt any, n int, opts ...GenerateOption) Generated {
	g, err := m.TryGenerate(prompt, n, opts...)
	if err != nil {
		panic(err)
	}
	return g
}

// Generated is a continuation and why it ended.
type Generated struct {
	Text   string  // the generated tokens, decoded
	Tokens []int32 // without the end-of-sequence token
	// Stop is why it ended: engine.StopLength (n tokens), engine.StopEOS,
	// engine.StopContext (the model's context is full) or engine.StopError.
	Stop engine.StopReason
}

// String is the generated text.
func (g Generated) String() string { return g.Text }

// TryGenerate is Generate returning the error. Reaching the end of the
// context is not an error: it returns what was generated with Stop
// engine.StopContext. On an error part way (a cancelled Context) it returns
// what was generated so far and the error.
func (m *Model) TryGenerate(prompt any, n int, opts ...GenerateOption) (Generated, error) {
	if err := m.lock(); err != nil {
		return Generated{Stop: engine.StopError}, err
	}
	defer m.mu.Unlock()
	s := m.generateSettings(opts)
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
	text, derr := m.engine().Model.Tok.Decode(g.Tokens)
	out.Text = text
	if err == nil {
		err = derr
	}
	return out, err
}

// LogitLens adds the logit lens to a trace that captured every layer's
// resid_post (tr.Lens, drawn by viz.LogitLens) and returns the trace: row
// l is after layer l, each normalised by the final norm with its own scale
// (the embedding is not a row). AccumulatedResid(tr, true) differs on both
// counts, as TransformerLens's does: row l is before layer l, and every
// row takes the scale of the final residual.
func (m *Model) LogitLens(tr *trace.Trace) *trace.Trace {
	m.owns("LogitLens", tr)
	if err := m.engine().LogitLens(tr); err != nil {
		panic(fmt.Errorf("nb.LogitLens: %w", err))
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
// Without Capture it captures every point (of the Layers given). It panics
// with the error.
func (m *Model) Start(prompt any, opts ...PrefillOption) *Steps {
	return Must(m.TryStart(prompt, opts...))
}

// TryStart is Start returning the error.
func (m *Model) TryStart(prompt any, opts ...PrefillOption) (*Steps, error) {
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	s := m.prefillSettings(opts)
	ids, err := m.promptTokens(prompt, s.cont)
	if err != nil {
		return nil, err
	}
	if !s.captured {
		s.o.Capture.Globs = []string{"*"}
	}
	sess, err := m.session(s.cont, len(ids), len(ids), s.o)
	if err != nil {
		return nil, err
	}
	r, err := sess.Start(s.ctx, ids, s.o)
	if err != nil {
		return nil, err
	}
	return &Steps{m: m, r: r}, nil
}

var errNilSteps = errors.New("nb: nil *Steps (use Model.Start)")

// do runs f on the steps' run with the model's session to itself.
func (s *Steps) do(f func(r *engine.Run) error) error {
	if s == nil || s.r == nil {
		return errNilSteps
	}
	if err := s.m.lock(); err != nil {
		return err
	}
	defer s.m.mu.Unlock()
	return f(s.r)
}

// Next runs the next layer; false once every layer has run, or the steps
// stopped (Err says why).
func (s *Steps) Next() (more bool) {
	s.do(func(r *engine.Run) error { more = r.Next(); return nil })
	return more
}

// Err is why the steps stopped early (nil when every layer ran), e.g. the
// model's next prefill took the steps' buffers.
func (s *Steps) Err() error {
	return s.do(func(r *engine.Run) error { return r.Err() })
}

// Layer is the layer that ran last (-1 before the first), the last one
// after the steps have run out or finished.
func (s *Steps) Layer() int {
	l := -1
	s.do(func(r *engine.Run) error { l = r.Layer(); return nil })
	return l
}

// To runs until the named point, e.g. "blocks.2.attn.hook_pattern"; a point
// already passed panics at once (a run goes forward only).
func (s *Steps) To(point string) *Steps {
	if err := s.do(func(r *engine.Run) error { return r.RunTo(point) }); err != nil {
		panic(err)
	}
	return s
}

// Trace is what has been captured so far.
func (s *Steps) Trace() *trace.Trace {
	var tr *trace.Trace
	Must(tr, s.do(func(r *engine.Run) (err error) { tr, err = r.Trace(); return err }))
	return tr
}

// Finish runs the rest and returns the whole trace.
func (s *Steps) Finish() *trace.Trace {
	var tr *trace.Trace
	Must(tr, s.do(func(r *engine.Run) (err error) { tr, err = r.Finish(); return err }))
	return tr
}

// Close abandons unfinished steps, handing their buffers back to the
// model; what they captured stays readable in a trace taken before.
func (s *Steps) Close() {
	s.do(func(r *engine.Run) error { r.Close(); return nil })
}
