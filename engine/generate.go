package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/stratalab/strata/trace"
)

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
