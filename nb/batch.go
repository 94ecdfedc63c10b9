package nb

import (
	"errors"
	"fmt"
	"slices"

	"github.com/stratalab/strata/backends"
	"github.com/stratalab/strata/engine"
	"github.com/stratalab/strata/trace"
)

// PrefillBatch runs a batch of prompts as one prefill
// (engine.Session.PrefillBatch, in the model's session, whose cache it
// starts over) and returns a trace per prompt, each as Prefill gives that
// prompt alone. prompts is a []string of texts, a []any of prompts as
// Prefill takes them (text, []int32 or []int), or token ids ([][]int32 or
// [][]int). Rows are packed with no padding, so that the products run once
// over the whole batch; hooks act on each prompt's rows as in its own
// prefill. A batch too large for the capture budget (Budget) or, on the
// CPU, for the host memory left runs as micro-batches of consecutive
// prompts that fit, with the same results. Attention patterns and scores,
// captured or hooked, are each prompt's own [heads, T, T]. A batch cannot
// Continue a prompt. Close the traces when done, as any.
func (m *Model) PrefillBatch(prompts any, opts ...PrefillOption) []*trace.Trace {
	return Must(m.TryPrefillBatch(prompts, opts...))
}

// TryPrefillBatch is PrefillBatch returning the error.
func (m *Model) TryPrefillBatch(prompts any, opts ...PrefillOption) ([]*trace.Trace, error) {
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	s := m.prefillSettings(opts)
	if s.cont {
		return nil, errors.New("nb.PrefillBatch: Continue does not apply to a batch, whose prompts each start at position 0")
	}
	list, err := batchPrompts(prompts)
	if err != nil {
		return nil, err
	}
	ids := make([][]int32, len(list))
	for i, p := range list {
		if ids[i], err = m.tokens(p); err != nil {
			return nil, fmt.Errorf("nb.PrefillBatch: prompt %d: %w", i, err)
		}
	}
	return m.prefillBatch(s, ids)
}

// prefillBatch runs a batch in micro-batches that fit the host memory left
// on the CPU (as hostFits does a prefill's; engine.MicroBatches), each as
// one prefill, and the capture budget on any backend (the session splits
// those). m.mu is held.
func (m *Model) prefillBatch(s *settings, ids [][]int32) ([]*trace.Trace, error) {
	lens := make([]int, len(ids))
	for i, p := range ids {
		lens[i] = len(p)
	}
	var limit int64
	if backends.OnHost(m.engine()) {
		if avail, err := hostAvailable(); err == nil {
			limit = max(avail, 1)
		}
	}
	ends, err := engine.MicroBatches(&m.engine().Model.Config, lens, s.o, limit)
	switch {
	case err != nil && limit > 0 && !errors.Is(err, engine.ErrOverBudget):
		return nil, fmt.Errorf("nb.PrefillBatch: %w (the host memory left)", err)
	case err != nil:
		return nil, fmt.Errorf("nb.PrefillBatch: %w", err)
	}
	m.pending = nil // the cache starts over
	var out []*trace.Trace
	start := 0
	for _, end := range ends {
		sess, err := m.session(false, slices.Max(lens[start:end]), slices.Max(lens[start:end]), s.o)
		var trs []*trace.Trace
		if err == nil {
			trs, err = sess.PrefillBatch(s.ctx, ids[start:end], s.o)
		}
		if err != nil {
			for _, tr := range out {
				tr.Close()
			}
			return nil, err
		}
		out = append(out, trs...)
		start = end
	}
	return out, nil
}

// batchPrompts lists the prompts of a batch, each as tokens takes one.
func batchPrompts(prompts any) ([]any, error) {
	var list []any
	switch p := prompts.(type) {
	case []any:
		list = p
	case []string:
		list = each(p)
	case [][]int32:
		list = each(p)
	case [][]int:
		list = each(p)
	default:
		return nil, fmt.Errorf("nb.PrefillBatch: a batch is a []string, []any, [][]int32 or [][]int of prompts, not %T", prompts)
	}
	if len(list) == 0 {
		return nil, errors.New("nb.PrefillBatch: the batch has no prompts")
	}
	return list, nil
}

func each[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// BatchMetric is a metric over a batch: each prompt's value (what
// TransformerLens's per_prompt=True keeps) and their mean.
type BatchMetric struct {
	PerPrompt []float64
	Mean      float64
}

// String is the mean and the number of prompts.
func (b BatchMetric) String() string {
	return fmt.Sprintf("mean %.4g over %d prompts", b.Mean, len(b.PerPrompt))
}

// MeanOver applies a metric to each trace of a batch: one metric for
// every trace (m.MeanLoss(1), say), or one per trace where each prompt has
// its own (m.LogitDiff of each prompt's answer and its foil, as in IOI).
func MeanOver(trs []*trace.Trace, metrics ...func(*trace.Trace) float64) BatchMetric {
	switch {
	case len(trs) == 0:
		panic(errors.New("nb.MeanOver: no traces"))
	case len(metrics) != 1 && len(metrics) != len(trs):
		panic(fmt.Errorf("nb.MeanOver: %d metrics for %d traces: give one for all, or one per trace", len(metrics), len(trs)))
	}
	b := BatchMetric{PerPrompt: make([]float64, len(trs))}
	for i, tr := range trs {
		f := metrics[0]
		if len(metrics) > 1 {
			f = metrics[i]
		}
		if f == nil {
			panic(fmt.Errorf("nb.MeanOver: metric %d is nil", i))
		}
		b.PerPrompt[i] = f(tr)
		b.Mean += b.PerPrompt[i]
	}
	b.Mean /= float64(len(trs))
	return b
}
