package trace

import "math"

// TokenLens is the logit lens for one target token: Prob[l][t] and Rank[l][t]
// are its probability and rank (0: the top token) when the final norm and
// unembedding are applied to layer l's resid_post at position t.
type TokenLens struct {
	Token int32
	Piece string
	Prob  [][]float64
	Rank  [][]int
}

// ProbRank returns softmax(logits)[target] and how many logits exceed
// logits[target] (its rank, 0 for the top token). A target outside the
// logits has probability 0 and rank len(logits), as a token never ranked.
func ProbRank(logits []float32, target int) (float64, int) {
	if target < 0 || target >= len(logits) {
		return 0, len(logits)
	}
	m := math.Inf(-1)
	for _, v := range logits {
		m = max(m, float64(v))
	}
	var sum float64
	rank := 0
	for _, v := range logits {
		sum += math.Exp(float64(v) - m)
		if v > logits[target] {
			rank++
		}
	}
	return math.Exp(float64(logits[target])-m) / sum, rank
}
