package trace

import (
	"errors"
	"fmt"
	"slices"
)

// PrevTokenScores returns each head's previous-token score from one layer's
// hook_pattern [heads, T, pos0+T]: the mean over query positions i >= 1 of
// the attention paid to position i-1.
func PrevTokenScores(pattern *Tensor) ([]float64, error) {
	return tensorScores(pattern, prevTokenCells)
}

// InductionScores returns each head's induction score from one layer's
// hook_pattern [heads, T, pos0+T] for a prompt that ends with two copies of
// a period-token sequence (see RepeatPeriod). The score is the mean, over
// the last period query positions i (the second copy), of the attention paid
// to position i-period+1: the token that followed the query's token in the
// first copy, where an induction head looks.
func InductionScores(pattern *Tensor, period int) ([]float64, error) {
	return tensorScores(pattern, func(t, keys int) (cells, error) { return inductionCells(t, keys, period) })
}

// cells is what a head score averages over: for each query row counted, the
// key columns whose attention it sums.
type cells struct {
	rows []int
	cols [][]int
}

func prevTokenCells(t, keys int) (cells, error) {
	pos0 := keys - t
	first := max(0, 1-pos0) // first query row whose position has a predecessor
	if first >= t {
		return cells{}, fmt.Errorf("trace: previous-token scores need a query at position 1 or later; the pattern covers position %d only", pos0)
	}
	var c cells
	for r := first; r < t; r++ {
		c.rows, c.cols = append(c.rows, r), append(c.cols, []int{pos0 + r - 1})
	}
	return c, nil
}

func inductionCells(t, keys, period int) (cells, error) {
	switch {
	case period < 1:
		return cells{}, fmt.Errorf("trace: induction period %d: want 1 or more", period)
	case period > t:
		return cells{}, fmt.Errorf("trace: induction period %d: the pattern has only %d query positions", period, t)
	case 2*period > keys:
		return cells{}, fmt.Errorf("trace: induction period %d needs two copies (%d positions); the pattern covers %d", period, 2*period, keys)
	}
	var c cells
	for r := t - period; r < t; r++ {
		c.rows, c.cols = append(c.rows, r), append(c.cols, []int{keys - t + r - period + 1})
	}
	return c, nil
}

// indices lays c out as flat indices into a [heads, t, keys] pattern, head by head.
func (c cells) indices(heads, t, keys int) []int {
	var idx []int
	for h := range heads {
		for k, r := range c.rows {
			for _, col := range c.cols[k] {
				idx = append(idx, (h*t+r)*keys+col)
			}
		}
	}
	return idx
}

// means turns the values at c.indices into each head's mean over queries.
func (c cells) means(heads int, v []float32) []float64 {
	scores := make([]float64, heads)
	i := 0
	for h := range scores {
		for k := range c.rows {
			for range c.cols[k] {
				scores[h] += float64(v[i])
				i++
			}
		}
		scores[h] /= float64(len(c.rows))
	}
	return scores
}

func tensorScores(pattern *Tensor, sel func(t, keys int) (cells, error)) ([]float64, error) {
	heads, t, keys, err := patternDims(pattern)
	if err != nil {
		return nil, err
	}
	if len(pattern.Data) != heads*t*keys {
		return nil, fmt.Errorf("trace: attention pattern of shape %v holds %d values, want %d", pattern.Shape, len(pattern.Data), heads*t*keys)
	}
	c, err := sel(t, keys)
	if err != nil {
		return nil, err
	}
	idx := c.indices(heads, t, keys)
	v := make([]float32, len(idx))
	for k, i := range idx {
		v[k] = pattern.Data[i]
	}
	return c.means(heads, v), nil
}

// RepeatPeriod returns the period P of the longest stretch at the end of
// tokens that repeats with period P and holds two copies or more (the
// smallest such P on ties, so six copies of a sentence give the sentence's
// length), or 0 when tokens do not end with a repeat.
func RepeatPeriod(tokens []int32) int {
	n := len(tokens)
	// same[p]: trailing positions whose token equals the one p before, the
	// Z-function of the reversed tokens, in time linear in n.
	rev := slices.Clone(tokens)
	slices.Reverse(rev)
	same := make([]int, n)
	for i, l, r := 1, 0, 0; i < n; i++ {
		if i < r {
			same[i] = min(r-i, same[i-l])
		}
		for i+same[i] < n && rev[same[i]] == rev[i+same[i]] {
			same[i]++
		}
		if i+same[i] > r {
			l, r = i, i+same[i]
		}
	}
	best, bestLen := 0, 0
	for p := 1; 2*p <= n; p++ {
		if s := same[p]; s >= p && s+p > bestLen {
			best, bestLen = p, s+p
		}
	}
	return best
}

// patternDims checks that x is shaped as hook_pattern is.
func patternDims(x *Tensor) (heads, t, keys int, err error) {
	if x == nil {
		return 0, 0, 0, errors.New("trace: attention pattern is nil")
	}
	return patternShape(x.Shape)
}

func patternShape(shape []int) (heads, t, keys int, err error) {
	if len(shape) != 3 {
		return 0, 0, 0, fmt.Errorf("trace: attention pattern has shape %v, want [heads, T, pos0+T]", shape)
	}
	heads, t, keys = shape[0], shape[1], shape[2]
	if heads < 1 || t < 1 || keys < t {
		return 0, 0, 0, fmt.Errorf("trace: attention pattern has shape %v, want [heads, T, pos0+T] with keys >= T >= 1", shape)
	}
	return heads, t, keys, nil
}
