package engine

import (
	"errors"
	"fmt"

	"github.com/stratalab/strata/internal/human"
	"github.com/stratalab/strata/model"
)

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
	if pos := s.Pos(); pos+len(tokens) > s.capacity {
		if pos == 0 {
			return nil, fmt.Errorf("engine: the prompt is %d tokens, which exceed the KV cache of %d positions (the model's context is %d tokens): %w",
				len(tokens), s.capacity, c.Context, ErrCacheFull)
		}
		return nil, fmt.Errorf("engine: %d tokens at position %d exceed the KV cache of %d positions (%d left): %w",
			len(tokens), pos, s.capacity, s.capacity-pos, ErrCacheFull)
	}
	if err := checkTokens(c, tokens, ""); err != nil {
		return nil, err
	}
	if err := checkPerPrompt(o.Hooks, 1); err != nil {
		return nil, err
	}
	return s.checkPacked([]int{len(tokens)}, o)
}

// checkTokens checks that every id is in the vocabulary; prompt names the
// prompt of a batch in the error.
func checkTokens(c *model.Config, tokens []int32, prompt string) error {
	for i, id := range tokens {
		if id < 0 || int(id) >= c.Vocab {
			return fmt.Errorf("engine: %stoken %d at index %d is outside the vocabulary of %d (ids are 0..%d)", prompt, id, i, c.Vocab, c.Vocab-1)
		}
	}
	return nil
}

// checkPacked checks the options of a prefill of prompts of the given
// lengths, packed row after row at the session's position, and lays it out.
func (s *Session) checkPacked(lens []int, o Options) (*layout, error) {
	c := &s.e.Model.Config
	if err := s.e.Model.File.Changed(); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
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
	if o.Logits == LogitsNone && o.Predict {
		return nil, errors.New("engine: Options.Predict with LogitsNone: there are no logits to predict from (use LogitsLast)")
	}
	for i := range o.Hooks {
		if err := o.Hooks[i].validate(c); err != nil {
			return nil, err
		}
		if o.Logits == LogitsNone && !o.Hooks[i].reachesBody(c) {
			return nil, fmt.Errorf("engine: hook at %q: with LogitsNone the final norm and LM head do not run, so it would never act (use LogitsLast or LogitsAll)", o.Hooks[i].Point)
		}
	}
	l := packedLayout(c, lens, s.Pos(), o)
	// Scores are the one buffer of three sizes multiplied: bound it before
	// the int product can wrap (only contrived head counts get near).
	if l.anyMaterialized() && float64(c.Heads)*float64(l.t)*float64(l.keys) > 1<<46 {
		return nil, fmt.Errorf("engine: attention scores of %d heads x %d x %d positions are too large to materialise", c.Heads, l.t, l.keys)
	}
	budget := o.Budget
	if budget == 0 {
		budget = DefaultBudget
	}
	if need := 4 * int64(l.captureElements); need > budget {
		return nil, fmt.Errorf("engine: capture needs %s for %d points at T=%d, over the budget of %s (narrow the capture globs or layers, or raise Options.Budget; nb.Budget in a notebook): %w",
			human.Bytes(need), len(l.order), l.t, human.Bytes(budget), ErrOverBudget)
	}
	return l, nil
}
