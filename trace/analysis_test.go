package trace

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// patternOf builds a [heads, t, pos0+t] pattern whose row of head h at query
// position i (absolute) is row(h, i), a map from key position to weight.
func patternOf(heads, t, pos0 int, row func(h, i int) map[int]float32) *Tensor {
	keys := pos0 + t
	x := &Tensor{Shape: []int{heads, t, keys}, Data: make([]float32, heads*t*keys)}
	for h := range heads {
		for r := range t {
			for k, w := range row(h, pos0+r) {
				x.Data[(h*t+r)*keys+k] = w
			}
		}
	}
	return x
}

// Scores are means of at most a few float32 weights that are exact in
// binary or 1/n; float64 sums of them are exact to ~1e-7 relative.
const scoreTol = 1e-6

func TestPrevTokenScoresOfKnownHeads(t *testing.T) {
	for _, pos0 := range []int{0, 3} {
		// Head 0 looks at the previous token, head 1 at itself, head 2
		// spreads evenly over every key it may see.
		p := patternOf(3, 4, pos0, func(h, i int) map[int]float32 {
			switch h {
			case 0:
				return map[int]float32{max(i-1, 0): 1}
			case 1:
				return map[int]float32{i: 1}
			}
			m := map[int]float32{}
			for k := 0; k <= i; k++ {
				m[k] = 1 / float32(i+1)
			}
			return m
		})
		got, err := PrevTokenScores(p)
		require.NoError(t, err)
		// Head 2 pays 1/(i+1) to i-1; the mean runs over i >= 1 only.
		uniform, n := 0.0, 0
		for i := max(pos0, 1); i < pos0+4; i++ {
			uniform += 1 / float64(i+1)
			n++
		}
		want := []float64{1, 0, uniform / float64(n)}
		require.InDeltaSlice(t, want, got, scoreTol, "pos0 %d", pos0)
	}
	// With pos0 = 0 the first query row has no predecessor: 13/36 is
	// (1/2 + 1/3 + 1/4) / 3, worked by hand.
	got, err := PrevTokenScores(patternOf(1, 4, 0, func(h, i int) map[int]float32 {
		m := map[int]float32{}
		for k := 0; k <= i; k++ {
			m[k] = 1 / float32(i+1)
		}
		return m
	}))
	require.NoError(t, err)
	require.InDelta(t, 13.0/36, got[0], scoreTol)
}

func TestInductionScoresOfKnownHeads(t *testing.T) {
	// BOS x1 x2 x3 x1 x2 x3: period 3, the second copy at positions 4..6.
	// An induction head at position i attends to i-2 (the token after the
	// earlier copy of its own token); a previous-token head to i-1; head 2
	// splits evenly between i-2 and BOS.
	tokens := []int32{1, 50, 60, 70, 50, 60, 70}
	period := RepeatPeriod(tokens)
	require.Equal(t, 3, period)
	p := patternOf(3, len(tokens), 0, func(h, i int) map[int]float32 {
		switch h {
		case 0:
			return map[int]float32{max(i-2, 0): 1}
		case 1:
			return map[int]float32{max(i-1, 0): 1}
		}
		if i < 2 {
			return map[int]float32{0: 1}
		}
		return map[int]float32{i - 2: 0.5, 0: 0.5}
	})
	got, err := InductionScores(p, period)
	require.NoError(t, err)
	require.InDeltaSlice(t, []float64{1, 0, 0.5}, got, scoreTol)

	// Only the second copy counts: a head that looks at i-2 only on the
	// last query scores 1/3.
	last := patternOf(1, len(tokens), 0, func(h, i int) map[int]float32 {
		if i == 6 {
			return map[int]float32{4: 1}
		}
		return map[int]float32{i: 1}
	})
	got, err = InductionScores(last, period)
	require.NoError(t, err)
	require.InDelta(t, 1.0/3, got[0], scoreTol)

	// A continued prefill: the first copy lies in the cache (pos0 = 4), the
	// second in this prefill's three query rows.
	cont := patternOf(1, 3, 4, func(h, i int) map[int]float32 { return map[int]float32{i - 2: 1} })
	got, err = InductionScores(cont, period)
	require.NoError(t, err)
	require.InDelta(t, 1.0, got[0], scoreTol)
}

func TestScoreErrorsNameTheProblem(t *testing.T) {
	one := patternOf(2, 1, 0, func(h, i int) map[int]float32 { return map[int]float32{0: 1} })
	_, err := PrevTokenScores(one)
	require.ErrorContains(t, err, "need a query at position 1 or later")

	p := patternOf(1, 4, 0, func(h, i int) map[int]float32 { return map[int]float32{i: 1} })
	_, err = InductionScores(p, 0)
	require.ErrorContains(t, err, "period 0: want 1 or more")
	_, err = InductionScores(p, 3)
	require.ErrorContains(t, err, "needs two copies (6 positions); the pattern covers 4")
	_, err = InductionScores(patternOf(1, 2, 6, func(h, i int) map[int]float32 { return nil }), 3)
	require.ErrorContains(t, err, "the pattern has only 2 query positions")

	_, err = PrevTokenScores(&Tensor{Shape: []int{4, 4}, Data: make([]float32, 16)})
	require.ErrorContains(t, err, "shape [4 4], want [heads, T, pos0+T]")
	_, err = PrevTokenScores(&Tensor{Shape: []int{1, 3, 2}, Data: make([]float32, 6)})
	require.ErrorContains(t, err, "keys >= T >= 1")
	_, err = PrevTokenScores(&Tensor{Shape: []int{1, 2, 2}, Data: make([]float32, 3)})
	require.ErrorContains(t, err, "holds 3 values, want 4")
}

func TestRepeatPeriod(t *testing.T) {
	require.Equal(t, 0, RepeatPeriod(nil))
	require.Equal(t, 0, RepeatPeriod([]int32{1, 2, 3}))
	require.Equal(t, 1, RepeatPeriod([]int32{1, 2, 2}))
	require.Equal(t, 4, RepeatPeriod([]int32{1, 9, 8, 7, 6, 9, 8, 7, 6}))
	require.Equal(t, 2, RepeatPeriod([]int32{5, 6, 5, 6, 5, 6, 5, 6}), "four copies of 2 beat two copies of 4")
	require.Equal(t, 4, RepeatPeriod([]int32{1, 10, 11, 12, 12, 10, 11, 12, 12}), "the doubled last token is a shorter repeat")
	require.Equal(t, 0, RepeatPeriod([]int32{1, 9, 8, 7, 9, 8, 6}))

	// Against the definition, counted plainly for every period.
	plain := func(tokens []int32) int {
		n := len(tokens)
		best, bestLen := 0, 0
		for p := 1; 2*p <= n; p++ {
			same := 0
			for i := n - 1; i >= p && tokens[i] == tokens[i-p]; i-- {
				same++
			}
			if same >= p && same+p > bestLen {
				best, bestLen = p, same+p
			}
		}
		return best
	}
	rng := rand.New(rand.NewPCG(4, 5))
	for range 2000 {
		tokens := make([]int32, rng.IntN(40))
		for i := range tokens {
			tokens[i] = int32(rng.IntN(3))
		}
		if k := rng.IntN(len(tokens) + 1); k > 0 && rng.IntN(2) == 0 { // end in copies of the last k
			tokens = append(tokens, tokens[len(tokens)-k:]...)
		}
		require.Equal(t, plain(tokens), RepeatPeriod(tokens), "%v", tokens)
	}
	// Two million equal tokens, as a loaded manifest may hold: linear, not
	// the hours the plain count takes.
	require.Equal(t, 1, RepeatPeriod(make([]int32, 2_000_000)))
}

// Issue 47.12: nil and out-of-range arguments are errors, not panics.
func TestNilAndOutOfRangeArguments(t *testing.T) {
	_, err := InductionScores(nil, 0)
	require.EqualError(t, err, "trace: attention pattern is nil")
	_, err = PrevTokenScores(nil)
	require.EqualError(t, err, "trace: attention pattern is nil")
	p, rank := ProbRank([]float32{1, 2}, -1)
	require.Equal(t, 0.0, p)
	require.Equal(t, 2, rank)
	p, rank = ProbRank([]float32{1, 2}, 2)
	require.Equal(t, 0.0, p)
	require.Equal(t, 2, rank)
	var s *Stack
	_, err = s.ApplyFinalNorm(&Matrix{}, nil, 1e-5)
	require.ErrorContains(t, err, "final norm of a nil stack")
}
