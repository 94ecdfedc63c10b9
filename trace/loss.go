package trace

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// allLogits checks that the captured logits l cover every position of the
// prefill, which a per-token loss needs.
func (t *Trace) allLogits(l *Tensor) error {
	if len(l.Shape) != 2 || len(l.Data) != l.Shape[0]*l.Shape[1] {
		return fmt.Errorf("trace: logits have shape %v, want [T, vocab]", l.Shape)
	}
	if l.Shape[0] != len(t.Tokens) {
		return fmt.Errorf("trace: per-token loss needs logits at every position (%d), the trace has %d rows: prefill with nb.AllLogits() (engine.Options{Logits: engine.LogitsAll})", len(t.Tokens), l.Shape[0])
	}
	return nil
}

// logSoftmax writes log(softmax(row)) into dst in float64; the max is
// subtracted first so exp cannot overflow.
func logSoftmax(dst []float64, row []float32) {
	m := math.Inf(-1)
	for _, v := range row {
		m = max(m, float64(v))
	}
	var sum float64
	for _, v := range row {
		sum += math.Exp(float64(v) - m)
	}
	lse := m + math.Log(sum)
	for i, v := range row {
		dst[i] = float64(v) - lse
	}
}

// LogProbs returns log-softmax of every logit row, [rows][vocab], in
// float64. It works on last-position logits too (one row).
func (t *Trace) LogProbs() ([][]float64, error) {
	var out [][]float64
	err := t.with("logits", func(err error) error {
		return fmt.Errorf("%w: log-probabilities need the logits, which every prefill keeps unless a capture plan leaves them out", err)
	}, func(l *Tensor) error {
		if len(l.Shape) != 2 || len(l.Data) != l.Shape[0]*l.Shape[1] {
			return fmt.Errorf("trace: logits have shape %v, want [T, vocab]", l.Shape)
		}
		rows, v := l.Shape[0], l.Shape[1]
		out = make([][]float64, rows)
		for r := range out {
			out[r] = make([]float64, v)
			logSoftmax(out[r], l.Data[r*v:(r+1)*v])
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// TokenLogit is a token and its logit.
type TokenLogit struct {
	ID    int32
	Logit float32
}

// TopLogits returns the k highest logits of a row of the logits (-1: the
// last, the only one without nb.AllLogits()) with their tokens, highest
// first; ties go to the lower id. TransformerLens's test_prompt prints the
// same ranking.
func (t *Trace) TopLogits(row, k int) (top []TokenLogit, err error) {
	err = t.with("logits", nil, func(l *Tensor) error {
		if len(l.Shape) != 2 || len(l.Data) != l.Shape[0]*l.Shape[1] {
			return fmt.Errorf("trace: logits have shape %v, want [rows, vocab]", l.Shape)
		}
		rows, v := l.Shape[0], l.Shape[1]
		asked := row
		if row < 0 {
			row += rows
		}
		if row < 0 || row >= rows {
			hint := ""
			if rows == 1 && len(t.Tokens) > 1 {
				hint = "; the trace kept the last position's logits only (capture every position's with nb.AllLogits() or engine.LogitsAll)"
			}
			return fmt.Errorf("trace: TopLogits: row %d of %d logit rows is out of range (-1 is the last)%s", asked, rows, hint)
		}
		if k < 1 {
			return fmt.Errorf("trace: TopLogits: k is %d; want at least 1", k)
		}
		top = TopOf(l.Data[row*v:(row+1)*v], k)
		return nil
	})
	return top, err
}

// TopOf is the k highest of a row of logits x with their tokens, highest
// first; ties go to the lower id.
func TopOf(x []float32, k int) []TokenLogit {
	order := make([]int32, len(x))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int { return cmp.Compare(x[b], x[a]) })
	top := make([]TokenLogit, min(max(k, 0), len(x)))
	for i, id := range order[:len(top)] {
		top[i] = TokenLogit{id, x[id]}
	}
	return top
}

// TokenLogProbs returns, for each position i < T-1, the log-probability the
// model gave at i to the token at i+1 (TransformerLens's
// lm_cross_entropy_loss with per_token=True, negated). It needs
// all-position logits.
func (t *Trace) TokenLogProbs() ([]float64, error) {
	var out []float64
	err := t.with("logits", nil, func(l *Tensor) error {
		if err := t.allLogits(l); err != nil {
			return err
		}
		v := l.Shape[1]
		n := len(t.Tokens) - 1
		if n < 1 {
			return fmt.Errorf("trace: a per-token loss needs two tokens or more, the trace has %d", len(t.Tokens))
		}
		row := make([]float64, v)
		out = make([]float64, n)
		for i := range out {
			next := int(t.Tokens[i+1])
			if next < 0 || next >= v {
				return fmt.Errorf("trace: token %d at position %d is outside the vocabulary of %d", next, i+1, v)
			}
			logSoftmax(row, l.Data[i*v:(i+1)*v])
			out[i] = row[next]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// TokenLoss is the cross-entropy loss per position: -TokenLogProbs, so
// loss[i] is the loss of predicting token i+1 at position i.
func (t *Trace) TokenLoss() ([]float64, error) {
	lp, err := t.TokenLogProbs()
	for i := range lp {
		lp[i] = -lp[i]
	}
	return lp, err
}

// MeanLoss is the mean of TokenLoss over positions from..T-2 (from 0: the
// whole prompt), the usual language-model loss.
func (t *Trace) MeanLoss(from int) (float64, error) {
	loss, err := t.TokenLoss()
	if err != nil {
		return 0, err
	}
	if from < 0 || from >= len(loss) {
		return 0, fmt.Errorf("trace: mean loss from position %d: the trace has losses at 0..%d", from, len(loss)-1)
	}
	var s float64
	for _, x := range loss[from:] {
		s += x
	}
	return s / float64(len(loss)-from), nil
}
