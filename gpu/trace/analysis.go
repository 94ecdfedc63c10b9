package trace

import "fmt"

// PrevTokenScores returns each head's previous-token score from one layer's
// hook_pattern [heads, T, pos0+T]: the mean over query positions i >= 1 of
// the attention paid to position i-1.
func PrevTokenScores(pattern *Tensor) ([]float64, error) {
	heads, t, keys, err := patternDims(pattern)
	if err != nil {
		return nil, err
	}
	pos0 := keys - t
	first := max(0, 1-pos0) // first query row whose position has a predecessor
	if first >= t {
		return nil, fmt.Errorf("trace: previous-token scores need a query at position 1 or later; the pattern covers position %d only", pos0)
	}
	scores := make([]float64, heads)
	for h := range scores {
		sum := 0.0
		for r := first; r < t; r++ {
			sum += float64(pattern.Data[(h*t+r)*keys+pos0+r-1])
		}
		scores[h] = sum / float64(t-first)
	}
	return scores, nil
}

// InductionScores returns each head's induction score from one layer's
// hook_pattern [heads, T, pos0+T] for a prompt that ends with two copies of
// a period-token sequence (see RepeatPeriod). The score is the mean, over
// the last period query positions i (the second copy), of the attention paid
// to position i-period+1: the token that followed the query's token in the
// first copy, where an induction head looks.
func InductionScores(pattern *Tensor, period int) ([]float64, error) {
	heads, t, keys, err := patternDims(pattern)
	if err != nil {
		return nil, err
	}
	switch {
	case period < 1:
		return nil, fmt.Errorf("trace: induction period %d: want 1 or more", period)
	case period > t:
		return nil, fmt.Errorf("trace: induction period %d: the pattern has only %d query positions", period, t)
	case 2*period > keys:
		return nil, fmt.Errorf("trace: induction period %d needs two copies (%d positions); the pattern covers %d", period, 2*period, keys)
	}
	scores := make([]float64, heads)
	for h := range scores {
		sum := 0.0
		for r := t - period; r < t; r++ {
			i := keys - t + r
			sum += float64(pattern.Data[(h*t+r)*keys+i-period+1])
		}
		scores[h] = sum / float64(period)
	}
	return scores, nil
}

// RepeatPeriod returns the period P of the longest stretch at the end of
// tokens that repeats with period P and holds two copies or more (the
// smallest such P on ties, so six copies of a sentence give the sentence's
// length), or 0 when tokens do not end with a repeat.
func RepeatPeriod(tokens []int32) int {
	n := len(tokens)
	best, bestLen := 0, 0
	for p := 1; 2*p <= n; p++ {
		same := 0 // trailing positions whose token equals the one p before
		for i := n - 1; i >= p && tokens[i] == tokens[i-p]; i-- {
			same++
		}
		if same >= p && same+p > bestLen {
			best, bestLen = p, same+p
		}
	}
	return best
}

// patternDims checks that x is laid out as hook_pattern is.
func patternDims(x *Tensor) (heads, t, keys int, err error) {
	if len(x.Shape) != 3 {
		return 0, 0, 0, fmt.Errorf("trace: attention pattern has shape %v, want [heads, T, pos0+T]", x.Shape)
	}
	heads, t, keys = x.Shape[0], x.Shape[1], x.Shape[2]
	if heads < 1 || t < 1 || keys < t {
		return 0, 0, 0, fmt.Errorf("trace: attention pattern has shape %v, want [heads, T, pos0+T] with keys >= T >= 1", x.Shape)
	}
	if len(x.Data) != heads*t*keys {
		return 0, 0, 0, fmt.Errorf("trace: attention pattern of shape %v holds %d values, want %d", x.Shape, len(x.Data), heads*t*keys)
	}
	return heads, t, keys, nil
}
