package gpu

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/model"
)

// The captured points tile their arenas in program order, an arena never
// spans two layers, and none passes arenaCap unless it holds one point.
func TestCapturesTileArenasByLayer(t *testing.T) {
	bonsai8b := model.Config{Layers: 36, DModel: 4096, FFN: 12288, Heads: 32, KVHeads: 8, HeadDim: 128, Vocab: 151936}
	tiny := model.Config{Layers: 2, DModel: 256, FFN: 768, Heads: 8, KVHeads: 4, HeadDim: 32, Vocab: 512}
	cases := []struct {
		what   string
		c      model.Config
		t      int
		o      Options
		arenas int
	}{
		// Embedding, then per layer: points up to the scores, the scores, the
		// pattern, the rest; then the tail.
		{"tiny, everything", tiny, 12, Options{Capture: CaptureAll(), Logits: LogitsAll}, 10},
		{"tiny, residuals", tiny, 12, Options{Capture: CaptureOf("blocks.*.hook_resid_post")}, 2},
		{"tiny, the first and last points", tiny, 12, Options{Capture: CaptureOf("hook_embed", "logits")}, 2},
		// A layer's points come to 1.7 GiB, scores and pattern 512 MiB each.
		{"bonsai-8b at T=2048, everything", bonsai8b, 2048, Options{Capture: CaptureAll(), Logits: LogitsLast}, -1},
	}
	for _, tc := range cases {
		l := newLayout(&tc.c, tc.t, 0, tc.o)
		if tc.arenas >= 0 {
			require.Len(t, l.arenas, tc.arenas, tc.what)
		}
		fill := make([]int, len(l.arenas))
		points := make([]int, len(l.arenas))
		layerOf := map[int]int{}
		for i, name := range l.order {
			s := l.slots[name]
			require.Equal(t, fill[s.arena], s.off, "%s: %s starts where the one before it ends", tc.what, name)
			if i > 0 {
				require.GreaterOrEqual(t, s.arena, l.slots[l.order[i-1]].arena, "%s: %s is in program order", tc.what, name)
			}
			layer, _ := SplitPoint(name)
			if prev, ok := layerOf[s.arena]; ok {
				require.Equal(t, prev, layer, "%s: %s shares an arena with another layer", tc.what, name)
			}
			layerOf[s.arena] = layer
			if _, local := SplitPoint(name); local == "attn.hook_attn_scores" || local == "attn.hook_pattern" {
				require.Equal(t, elements(s.shape), l.arenas[s.arena], "%s: %s has its arena to itself (the kernels write it there)", tc.what, name)
			}
			fill[s.arena] += elements(s.shape)
			points[s.arena]++
		}
		require.Equal(t, l.arenas, fill, "%s: the arenas are exactly full", tc.what)
		total := 0
		for i, n := range l.arenas {
			total += n
			if points[i] > 1 {
				require.LessOrEqual(t, n, arenaCap, "%s: arena %d", tc.what, i)
			}
		}
		require.Equal(t, l.captureElements, total, tc.what)
		if tc.arenas < 0 {
			require.Greater(t, len(l.arenas), tc.c.Layers+2, "%s: layers are split", tc.what)
			require.Greater(t, slices.Max(l.arenas), arenaCap, "%s: a point larger than an arena gets one of its own", tc.what)
		}
	}
}
