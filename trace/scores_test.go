package trace

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDuplicateTokenScoresByHand(t *testing.T) {
	// Tokens a b a a: position 2 has an earlier a at 0, position 3 at 0
	// and 2. Head 0 puts all its attention on earlier copies; head 1 on
	// itself; head 2 spreads evenly.
	tokens := []int32{1, 2, 1, 1}
	p := patternOf(3, 4, 0, func(h, i int) map[int]float32 {
		switch h {
		case 0:
			switch i {
			case 2:
				return map[int]float32{0: 1}
			case 3:
				return map[int]float32{0: 0.5, 2: 0.5}
			}
			return map[int]float32{i: 1}
		case 1:
			return map[int]float32{i: 1}
		}
		m := map[int]float32{}
		for k := 0; k <= i; k++ {
			m[k] = 1 / float32(i+1)
		}
		return m
	})
	got, err := DuplicateTokenScores(p, tokens)
	require.NoError(t, err)
	// Head 2: (1/3 + 2/4) / 2 = 5/12.
	require.InDeltaSlice(t, []float64{1, 0, 5.0 / 12}, got, scoreTol)

	_, err = DuplicateTokenScores(p, []int32{1, 2, 3, 4})
	require.ErrorContains(t, err, "occurs twice")
}

func TestHeadScoresRankEveryLayer(t *testing.T) {
	// Two layers of a 3+3 repeat: layer 1 head 0 is an induction head,
	// layer 0 head 1 a previous-token head.
	tokens := []int32{7, 8, 9, 7, 8, 9}
	tr := New()
	tr.Model = Model{Layers: 2, Heads: 2}
	tr.Tokens = tokens
	prev := func(h, i int) map[int]float32 { return map[int]float32{max(i-1, 0): 1} }
	self := func(h, i int) map[int]float32 { return map[int]float32{i: 1} }
	ind := func(h, i int) map[int]float32 {
		if i >= 3 {
			return map[int]float32{i - 2: 1}
		}
		return map[int]float32{0: 1}
	}
	tr.Put("blocks.0.attn.hook_pattern", patternOf(2, 6, 0, func(h, i int) map[int]float32 {
		if h == 1 {
			return prev(h, i)
		}
		return self(h, i)
	}))
	tr.Put("blocks.1.attn.hook_pattern", patternOf(2, 6, 0, func(h, i int) map[int]float32 {
		if h == 0 {
			return ind(h, i)
		}
		return self(h, i)
	}))
	s, err := HeadScores(tr, Induction)
	require.NoError(t, err)
	require.Equal(t, HeadScore{1, 0, 1}, s.Best())
	require.Equal(t, HeadList{{1, 0, 1}, {0, 0, 0}}, s.Top(2), "ties keep layer, head order")
	require.Len(t, s.Top(10), 4)
	require.Empty(t, s.Top(-1))
	require.Equal(t, HeadList{{1, 1, 0}, {0, 1, 0}}, Scores{{3, 0}, {2, 0}}.Bottom(2), "lowest first")
	require.Len(t, s.Bottom(10), 4)
	require.Empty(t, s.Bottom(-1))

	s, err = HeadScores(tr, PrevToken)
	require.NoError(t, err)
	require.Equal(t, HeadScore{0, 1, 1}, s.Best())
	require.Equal(t, "L0H1 1.000", s.Best().String())

	// Each layer equals the single-layer function, as notebook 02 called it.
	s, err = HeadScores(tr, DuplicateToken)
	require.NoError(t, err)
	for l := range 2 {
		want, err := DuplicateTokenScores(tr.Tensor(LayerPoint(l, "attn.hook_pattern")), tokens)
		require.NoError(t, err)
		require.Equal(t, want, s[l])
	}

	_, err = HeadScores(tr, "copying")
	require.ErrorContains(t, err, "unknown head score")
	tr.Tokens = []int32{1, 2, 3, 4, 5, 6}
	_, err = HeadScores(tr, Induction)
	require.ErrorContains(t, err, "nb.RepeatedRandom")
	drop(tr, "blocks.1.attn.hook_pattern")
	_, err = HeadScores(tr, PrevToken)
	require.ErrorContains(t, err, `nb.Capture("blocks.*.attn.hook_pattern")`)
}

func TestBestOfNoScoresIsNotAHead(t *testing.T) {
	b := Scores{}.Best()
	require.Equal(t, -1, b.Layer)
	require.Equal(t, -1, b.Head)
	require.True(t, math.IsNaN(b.Score))
	require.Empty(t, Scores{{}}.Top(3))
	require.Equal(t, "(none)", Scores{{}}.Top(3).String())
}

func TestMinusLeavesTheScoresAlone(t *testing.T) {
	s := Scores{{0.25, 0.5}, {1}}
	require.Equal(t, Scores{{0, 0.25}, {0.75}}, s.Minus(0.25))
	require.Equal(t, Scores{{0.25, 0.5}, {1}}, s, "a copy")
}
