package trace

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// randomLogits builds a trace of T tokens with logits at rows positions,
// spread wide enough (±20) that a softmax without the max shift would be
// visibly inaccurate in float32 but not in float64.
func randomLogits(T, rows, vocab int, seed uint64) *Trace {
	r := rand.New(rand.NewPCG(seed, 1))
	tr := New()
	for range T {
		tr.Tokens = append(tr.Tokens, int32(r.IntN(vocab)))
	}
	l := &Tensor{Shape: []int{rows, vocab}, Data: make([]float32, rows*vocab)}
	for i := range l.Data {
		l.Data[i] = float32(r.NormFloat64() * 8)
	}
	tr.Put("logits", l)
	return tr
}

// naiveLogProb is log(exp(x[k]) / sum exp(x)), written out in float64 with
// no shift: fine for |x| < 700.
func naiveLogProb(row []float32, k int) float64 {
	var sum float64
	for _, v := range row {
		sum += math.Exp(float64(v))
	}
	return math.Log(math.Exp(float64(row[k])) / sum)
}

func TestTokenLossIsCrossEntropyOfTheNextToken(t *testing.T) {
	const T, V = 7, 50
	tr := randomLogits(T, T, V, 3)
	loss, err := tr.TokenLoss()
	require.NoError(t, err)
	lp, err := tr.TokenLogProbs()
	require.NoError(t, err)
	all, err := tr.LogProbs()
	require.NoError(t, err)
	require.Len(t, loss, T-1)
	l := tr.Tensor("logits")
	var mean float64
	for i := range T - 1 {
		want := naiveLogProb(l.Data[i*V:(i+1)*V], int(tr.Tokens[i+1]))
		// Both are float64 from the same float32 inputs; they differ only
		// in rounding of ~V terms, ~1e-14.
		require.InDelta(t, -want, loss[i], 1e-12, "position %d", i)
		require.InDelta(t, want, lp[i], 1e-12)
		require.InDelta(t, want, all[i][tr.Tokens[i+1]], 1e-12)
		mean -= want / (T - 1)
	}
	got, err := tr.MeanLoss(0)
	require.NoError(t, err)
	require.InDelta(t, mean, got, 1e-12)
	got, err = tr.MeanLoss(T - 2)
	require.NoError(t, err)
	require.InDelta(t, loss[T-2], got, 1e-15)
	_, err = tr.MeanLoss(T - 1)
	require.ErrorContains(t, err, "0..5")

	// Each row of LogProbs is a distribution.
	for _, row := range all {
		var s float64
		for _, v := range row {
			s += math.Exp(v)
		}
		require.InDelta(t, 1, s, 1e-12)
	}
}

func TestTokenLossNeedsEveryPositionsLogits(t *testing.T) {
	tr := randomLogits(5, 1, 10, 4)
	_, err := tr.TokenLoss()
	require.ErrorContains(t, err, "nb.AllLogits()")
	lp, err := tr.LogProbs()
	require.NoError(t, err, "one row is still a distribution")
	require.Len(t, lp, 1)
	_, err = New().TokenLoss()
	require.ErrorContains(t, err, "logits was not captured")
}

func TestProbRank(t *testing.T) {
	row := []float32{1, 3, 2, 3}
	p, r := ProbRank(row, 2)
	e := []float64{math.E, math.Exp(3), math.Exp(2), math.Exp(3)}
	require.InDelta(t, e[2]/(e[0]+e[1]+e[2]+e[3]), p, 1e-15)
	require.Equal(t, 2, r, "two logits are larger")
	_, r = ProbRank(row, 1)
	require.Equal(t, 0, r, "ties do not push a token down")
}

// TopLogits ranks a row's logits as a plain scan for the largest, k times,
// does; rows count back from -1.
func TestTopLogits(t *testing.T) {
	const T, V = 5, 40
	tr := randomLogits(T, T, V, 9)
	l := tr.Tensor("logits")
	l.Data[3*V+7], l.Data[3*V+11] = 99, 99 // a tie: the lower id first
	top, err := tr.TopLogits(-2, 4)
	require.NoError(t, err)
	row := l.Data[3*V : 4*V]
	taken := map[int]bool{}
	for i := range 4 {
		best := -1
		for j, v := range row {
			if !taken[j] && (best < 0 || v > row[best]) {
				best = j
			}
		}
		taken[best] = true
		require.Equal(t, TokenLogit{int32(best), row[best]}, top[i], "rank %d", i)
	}
	require.Equal(t, []TokenLogit{{7, 99}, {11, 99}}, top[:2])
	top, err = tr.TopLogits(0, 100)
	require.NoError(t, err)
	require.Len(t, top, V, "k past the vocabulary gives all of it")
	_, err = tr.TopLogits(T, 1)
	require.EqualError(t, err, "trace: TopLogits: row 5 of 5 logit rows is out of range (-1 is the last)")
	_, err = tr.TopLogits(-6, 1)
	require.EqualError(t, err, "trace: TopLogits: row -6 of 5 logit rows is out of range (-1 is the last)", "the row asked for")
	_, err = randomLogits(T, 1, V, 9).TopLogits(-2, 1)
	require.EqualError(t, err, "trace: TopLogits: row -2 of 1 logit rows is out of range (-1 is the last); the trace kept the last position's logits only (capture every position's with nb.AllLogits() or engine.LogitsAll)")
	_, err = tr.TopLogits(0, 0)
	require.ErrorContains(t, err, "k is 0")
	_, err = New().TopLogits(-1, 1)
	require.ErrorContains(t, err, "logits")
}
