package trace

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// HeadKind names a head score.
type HeadKind string

// Head scores, the kinds TransformerLens's head detectors find. Each is
// the mean attention a head pays, over the query positions where it is
// defined, to the key the kind cares about. TransformerLens's detect_head
// ("mul") divides by every query row instead, so its scores are smaller
// where the kind is defined on fewer rows: previous-token by (T-1)/T (no
// row 0 here), duplicate-token by the share of rows with an earlier
// duplicate; the ARENA induction stripe (pattern.diagonal(1 - n)) also
// counts two rows of the first copy: its second-last token attending to
// BOS and its last attending to its first.
const (
	// Induction: from the second copy of a repeated sequence to the token
	// after the query's first occurrence (InductionScores).
	Induction HeadKind = "induction"
	// PrevToken: to the previous position (PrevTokenScores).
	PrevToken HeadKind = "previous-token"
	// DuplicateToken: to earlier positions holding the same token
	// (DuplicateTokenScores).
	DuplicateToken HeadKind = "duplicate-token"
)

// HeadScore is one head's score.
type HeadScore struct {
	Layer, Head int
	Score       float64
}

func (h HeadScore) String() string { return fmt.Sprintf("L%dH%d %.3f", h.Layer, h.Head, h.Score) }

// HeadList is heads in rank order; it prints as "L2H4 2.895, L3H0 0.534".
type HeadList []HeadScore

func (l HeadList) String() string {
	if len(l) == 0 {
		return "(none)"
	}
	parts := make([]string, len(l))
	for i, h := range l {
		parts[i] = h.String()
	}
	return strings.Join(parts, ", ")
}

// Scores holds one value per head, [layer][head].
type Scores [][]float64

// Minus returns a copy with v taken from every score: scores against a
// baseline (chance, or a clean run), which a figure then centres at 0.
func (s Scores) Minus(v float64) Scores {
	out := make(Scores, len(s))
	for l, row := range s {
		out[l] = make([]float64, len(row))
		for h, x := range row {
			out[l][h] = x - v
		}
	}
	return out
}

// Ranked returns every head, highest score first (ties by layer, then head).
func (s Scores) Ranked() HeadList {
	var out HeadList
	for l := range s {
		for h, v := range s[l] {
			out = append(out, HeadScore{l, h, v})
		}
	}
	slices.SortStableFunc(out, func(a, b HeadScore) int { return cmp.Compare(b.Score, a.Score) })
	return out
}

// Top returns the k highest-scoring heads (all of them when k exceeds the count).
func (s Scores) Top(k int) HeadList {
	r := s.Ranked()
	return r[:min(max(k, 0), len(r))]
}

// Bottom returns the k lowest-scoring heads, lowest first: for ablation
// effects on a logit difference (nb's AblateHeads, ablated minus plain),
// the heads the answer needs most; on a loss, those are Top.
func (s Scores) Bottom(k int) HeadList {
	r := s.Ranked()
	r = r[len(r)-min(max(k, 0), len(r)):]
	slices.Reverse(r)
	return r
}

// Best is Top(1)[0]; with no heads, layer and head -1 and a NaN score.
func (s Scores) Best() HeadScore {
	if r := s.Top(1); len(r) > 0 {
		return r[0]
	}
	return HeadScore{Layer: -1, Head: -1, Score: math.NaN()}
}

// HeadScores scores every head of every layer from the captured
// blocks.*.attn.hook_pattern. Induction needs a prompt that ends in two
// copies of a sequence (nb.RepeatedRandom); its period is found with
// RepeatPeriod.
//
// A pattern still on the device has only the entries a score averages read
// (T x heads of them per layer for induction and previous-token), never the
// whole [heads, T, T] pattern.
func HeadScores(tr *Trace, kind HeadKind) (Scores, error) {
	var sel func(t, keys int) (cells, error)
	switch kind {
	case PrevToken:
		sel = prevTokenCells
	case Induction:
		p := RepeatPeriod(tr.Tokens)
		if p == 0 {
			return nil, fmt.Errorf("trace: induction scores need a prompt ending in two copies of a sequence (nb.RepeatedRandom); this one does not repeat")
		}
		sel = func(t, keys int) (cells, error) { return inductionCells(t, keys, p) }
	case DuplicateToken:
		sel = func(t, keys int) (cells, error) { return duplicateTokenCells(t, keys, tr.Tokens) }
	default:
		return nil, fmt.Errorf("trace: unknown head score %q (want %q, %q or %q)", kind, Induction, PrevToken, DuplicateToken)
	}
	out := make(Scores, tr.Model.Layers)
	for l := range out {
		name := LayerPoint(l, AttnPattern)
		if !tr.Has(name) {
			return nil, missing(tr.notCaptured(name), name)
		}
		heads, t, keys, err := patternShape(tr.Shape(name))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		c, err := sel(t, keys)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		v, err := tr.Elements(name, c.indices(heads, t, keys))
		if err != nil {
			return nil, err
		}
		out[l] = c.means(heads, v)
	}
	return out, nil
}

// DuplicateTokenScores returns each head's duplicate-token score from one
// layer's hook_pattern [heads, T, pos0+T] and this prefill's tokens: the
// mean, over query positions whose token occurred earlier in the prefill,
// of the attention paid to those earlier occurrences together. Tokens of an
// earlier prefill (before pos0) are not known and not counted.
func DuplicateTokenScores(pattern *Tensor, tokens []int32) ([]float64, error) {
	return tensorScores(pattern, func(t, keys int) (cells, error) { return duplicateTokenCells(t, keys, tokens) })
}

func duplicateTokenCells(t, keys int, tokens []int32) (cells, error) {
	if len(tokens) != t {
		return cells{}, fmt.Errorf("trace: %d tokens for a pattern of %d query positions", len(tokens), t)
	}
	pos0 := keys - t
	var c cells
	for r := range t {
		var dup []int
		for j := range r {
			if tokens[j] == tokens[r] {
				dup = append(dup, pos0+j)
			}
		}
		if len(dup) > 0 {
			c.rows, c.cols = append(c.rows, r), append(c.cols, dup)
		}
	}
	if len(c.rows) == 0 {
		return cells{}, fmt.Errorf("trace: duplicate-token scores need a token that occurs twice; none does")
	}
	return c, nil
}
