// Package nb is what notebooks import: open a model, prefill with captures
// and hooks, step through layers, and show figures, in calls that read well
// in a GoNB cell. It is a thin layer over model, gpu and viz; the same calls
// work outside a notebook, where Show writes files instead of displaying.
package nb

import (
	"context"
	"fmt"

	"github.com/stratalab/strata/gpu"
	"github.com/stratalab/strata/gpu/backends"
	"github.com/stratalab/strata/gpu/trace"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/model/tokenizer"
)

// Model is a model made resident on a backend, with a session for
// incremental prefills.
type Model struct {
	*gpu.Engine
	// Note says which backend runs the model and why.
	Note string
	sess *gpu.Session
}

// Open loads a GGUF model ("" for the embedded default model) on the best
// backend, or on the one named ("cpu", "vulkan", "auto").
func Open(path string, backend ...string) (*Model, error) {
	var m *model.Model
	var err error
	if path == "" {
		m, err = model.Default()
	} else {
		m, err = model.Open(path)
	}
	if err != nil {
		return nil, err
	}
	name := "auto"
	if len(backend) > 0 {
		name = backend[0]
	}
	b, note, err := backends.Open(name)
	if err != nil {
		return nil, err
	}
	e, err := gpu.NewEngine(m, b)
	if err != nil {
		return nil, err
	}
	return &Model{Engine: e, Note: note}, nil
}

// MustOpen is Open for notebook cells: it panics with the error.
func MustOpen(path string, backend ...string) *Model {
	m, err := Open(path, backend...)
	if err != nil {
		panic(err)
	}
	return m
}

// Option adjusts a prefill.
type Option func(*settings)

type settings struct {
	o        gpu.Options
	cont     bool
	ctx      context.Context
	captured bool
}

// Capture keeps the points matching the globs, e.g.
// Capture("blocks.*.attn.hook_pattern", "blocks.*.hook_resid_post").
func Capture(globs ...string) Option {
	return func(s *settings) {
		s.o.Capture.Globs = append(s.o.Capture.Globs, globs...)
		s.captured = true
	}
}

// Layers limits per-layer captures to layers first..last.
func Layers(first, last int) Option {
	return func(s *settings) { s.o.Capture.FirstLayer, s.o.Capture.LastLayer = first, last }
}

// Hooks intervenes during the prefill (gpu.AblateHead, gpu.Patch, ...).
func Hooks(h ...gpu.Hook) Option { return func(s *settings) { s.o.Hooks = append(s.o.Hooks, h...) } }

// AllLogits computes logits (and predictions) at every position, not only the last.
func AllLogits() Option { return func(s *settings) { s.o.Logits = gpu.LogitsAll } }

// Budget bounds the capture's memory in bytes.
func Budget(bytes int64) Option { return func(s *settings) { s.o.Budget = bytes } }

// Continue appends to the previous prefill's KV cache instead of starting over.
func Continue() Option { return func(s *settings) { s.cont = true } }

// Context lets a prefill be cancelled.
func Context(ctx context.Context) Option { return func(s *settings) { s.ctx = ctx } }

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
	return s
}

// Tokens encodes text as the model's tokenizer does for a prompt (BOS per
// its metadata); it panics on text the tokenizer cannot represent.
func (m *Model) Tokens(text string) []int32 {
	ids, err := m.Model.Tok.Encode(text, tokenizer.Options{})
	if err != nil {
		panic(err)
	}
	return ids
}

// Pieces are the display strings of ids.
func (m *Model) Pieces(ids []int32) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = m.Model.Tok.Piece(id)
	}
	return out
}

func (m *Model) tokens(prompt any) ([]int32, error) {
	switch p := prompt.(type) {
	case string:
		return m.Model.Tok.Encode(p, tokenizer.Options{})
	case []int32:
		return p, nil
	case []int:
		ids := make([]int32, len(p))
		for i, v := range p {
			ids[i] = int32(v)
		}
		return ids, nil
	}
	return nil, fmt.Errorf("nb: a prompt is a string or token ids ([]int32), not %T", prompt)
}

// session returns the model's session, fresh unless continuing.
func (m *Model) session(cont bool) (*gpu.Session, error) {
	if m.sess == nil {
		s, err := m.NewSession(0)
		if err != nil {
			return nil, err
		}
		m.sess = s
	}
	if !cont {
		m.sess.Reset()
	}
	return m.sess, nil
}

// Try runs a prefill and returns its trace or an error.
func (m *Model) Try(prompt any, opts ...Option) (*trace.Trace, error) {
	ids, err := m.tokens(prompt)
	if err != nil {
		return nil, err
	}
	s := m.settings(opts)
	sess, err := m.session(s.cont)
	if err != nil {
		return nil, err
	}
	return sess.Prefill(s.ctx, ids, s.o)
}

// Prefill runs the prompt (text or token ids) through every layer and
// returns what was captured; it panics with the error, as notebook cells want.
func (m *Model) Prefill(prompt any, opts ...Option) *trace.Trace {
	tr, err := m.Try(prompt, opts...)
	if err != nil {
		panic(err)
	}
	return tr
}

// Generate continues text greedily by n tokens and returns the continuation.
func (m *Model) Generate(text string, n int) string {
	tr := m.Prefill(text)
	var out []int32
	for len(out) < n {
		next := tr.Predicted[len(tr.Predicted)-1]
		if next == m.Model.Tok.EOS() {
			break
		}
		out = append(out, next)
		tr = m.Prefill([]int32{next}, Continue())
	}
	s, err := m.Model.Tok.Decode(out)
	if err != nil {
		panic(err)
	}
	return s
}

// Lens adds the logit lens to a trace that captured every layer's resid_post.
func (m *Model) Lens(tr *trace.Trace) *trace.Trace {
	if err := m.LogitLens(tr); err != nil {
		panic(err)
	}
	return tr
}

// Steps is a prefill advanced a layer at a time.
type Steps struct{ r *gpu.Run }

// Start begins a step-wise prefill; call Next to advance a layer. The
// model's next prefill (or Start) ends it: the steps share its buffers.
func (m *Model) Start(prompt any, opts ...Option) *Steps {
	ids, err := m.tokens(prompt)
	if err != nil {
		panic(err)
	}
	s := m.settings(opts)
	if !s.captured {
		s.o.Capture = gpu.CaptureAll()
	}
	sess, err := m.session(s.cont)
	if err != nil {
		panic(err)
	}
	r, err := sess.Start(s.ctx, ids, s.o)
	if err != nil {
		panic(err)
	}
	return &Steps{r: r}
}

// Next runs the next layer; false once every layer has run.
func (s *Steps) Next() bool { return s.r.Next() }

// Layer is the layer that ran last (-1 before the first).
func (s *Steps) Layer() int {
	l, _ := gpu.SplitPoint(s.r.Point())
	return l
}

// To runs until the named point, e.g. "blocks.2.attn.hook_pattern".
func (s *Steps) To(point string) *Steps {
	if err := s.r.RunTo(point); err != nil {
		panic(err)
	}
	return s
}

// Trace is what has been captured so far.
func (s *Steps) Trace() *trace.Trace {
	tr, err := s.r.Trace()
	if err != nil {
		panic(err)
	}
	return tr
}

// Finish runs the rest and returns the whole trace.
func (s *Steps) Finish() *trace.Trace {
	tr, err := s.r.Finish()
	if err != nil {
		panic(err)
	}
	return tr
}
