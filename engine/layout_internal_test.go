package engine

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/trace"
)

// The captured points tile their arenas in program order, each at a
// multiple of SlotAlign, an arena never spans two layers, and none passes
// arenaCap unless it holds one point; aliases take no room of their own.
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
		{"tiny, everything", tiny, 13, Options{Capture: CaptureAll(), Logits: LogitsAll}, 10},
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
		prevArena := 0
		for _, name := range l.order {
			s := l.slots[name]
			if s.alias {
				same := l.slots[trace.SameAs(&tc.c, name, 0)]
				require.Equal(t, [2]int{same.arena, same.off}, [2]int{s.arena, s.off}, "%s: %s shares its slot", tc.what, name)
				require.Equal(t, elements(same.shape), elements(s.shape), "%s: %s", tc.what, name)
				continue
			}
			require.Equal(t, (fill[s.arena]+backend.SlotAlign-1)/backend.SlotAlign*backend.SlotAlign, s.off, "%s: %s starts at the first aligned place after the one before it", tc.what, name)
			require.GreaterOrEqual(t, s.arena, prevArena, "%s: %s is in program order", tc.what, name)
			prevArena = s.arena
			layer, _ := trace.SplitPoint(name)
			if prev, ok := layerOf[s.arena]; ok {
				require.Equal(t, prev, layer, "%s: %s shares an arena with another layer", tc.what, name)
			}
			layerOf[s.arena] = layer
			if _, local := trace.SplitPoint(name); local == "attn.hook_attn_scores" || local == "attn.hook_pattern" {
				require.Equal(t, elements(s.shape), l.arenas[s.arena], "%s: %s has its arena to itself (the CPU keeps masked entries of whole arenas)", tc.what, name)
			}
			fill[s.arena] = s.off + elements(s.shape)
			points[s.arena]++
		}
		require.Equal(t, l.arenas, fill, "%s: the arenas end where their last point does", tc.what)
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

// A point shares the slot of an earlier one with the same values only
// where nothing can make them differ: no hook at it, and a KV cache that
// holds only this prefill's keys and values.
func TestAliasesOnlyWhereTheValuesAreTheSame(t *testing.T) {
	c := model.Config{Layers: 2, DModel: 64, FFN: 128, Heads: 4, KVHeads: 2, HeadDim: 16, Vocab: 64}
	all := Options{Capture: CaptureAll()}
	aliasOf := func(c model.Config, pos0 int, o Options) map[string]string {
		l := newLayout(&c, 8, pos0, o)
		out := map[string]string{}
		for _, name := range l.order {
			if s := l.slots[name]; s.alias {
				for _, other := range l.order {
					if o := l.slots[other]; !o.alias && o.arena == s.arena && o.off == s.off {
						out[name] = other
					}
				}
			}
		}
		return out
	}
	require.Equal(t, map[string]string{
		"blocks.0.hook_resid_pre": "hook_embed",
		"blocks.1.hook_resid_pre": "blocks.0.hook_resid_post",
		"blocks.0.attn.cache_k":   "blocks.0.attn.hook_rot_k",
		"blocks.0.attn.cache_v":   "blocks.0.attn.hook_v",
		"blocks.1.attn.cache_k":   "blocks.1.attn.hook_rot_k",
		"blocks.1.attn.cache_v":   "blocks.1.attn.hook_v",
	}, aliasOf(c, 0, all))
	require.Equal(t, map[string]string{
		"blocks.0.hook_resid_pre": "hook_embed",
		"blocks.1.hook_resid_pre": "blocks.0.hook_resid_post",
	}, aliasOf(c, 5, all), "after position 0 the cache holds earlier keys too")
	hooked := Options{Capture: CaptureAll(), Hooks: []Hook{Scale("blocks.1.hook_resid_pre", 2), Scale("blocks.*.attn.cache_?", 1)}}
	require.Equal(t, map[string]string{"blocks.0.hook_resid_pre": "hook_embed"}, aliasOf(c, 0, hooked))
	require.Equal(t, map[string]string{}, aliasOf(c, 0, Options{Capture: CaptureOf("blocks.*.hook_resid_pre", "blocks.*.attn.cache_*")}),
		"nothing to share with")
	learned := c
	learned.Pos = model.PosLearned
	require.Equal(t, map[string]string{
		"blocks.1.hook_resid_pre": "blocks.0.hook_resid_post",
		"blocks.0.attn.cache_k":   "blocks.0.attn.hook_k",
		"blocks.0.attn.cache_v":   "blocks.0.attn.hook_v",
		"blocks.1.attn.cache_k":   "blocks.1.attn.hook_k",
		"blocks.1.attn.cache_v":   "blocks.1.attn.hook_v",
	}, aliasOf(learned, 0, all), "learned positions are added after hook_embed; keys are not rotated")
}
