package trace

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/model"
)

func TestPointsAreNamedLikeTransformerLens(t *testing.T) {
	names := Points(&model.Config{Layers: 2})
	require.Equal(t, "hook_embed", names[0])
	require.Equal(t, "logits", names[len(names)-1])
	require.Contains(t, names, "blocks.1.attn.hook_pattern")
	require.Contains(t, names, "blocks.0.ln1.hook_normalized")
	l, local := SplitPoint("blocks.12.attn.cache_k")
	require.Equal(t, 12, l)
	require.Equal(t, AttnCacheK, local)
	require.Equal(t, "blocks.3.x", LayerPoint(3, "x"))
	for _, name := range []string{"logits", "blocks.-1.hook_resid_post", "blocks.x.hook_resid_post"} {
		l, local := SplitPoint(name)
		require.Equal(t, -1, l, name)
		require.Equal(t, Point(name), local, "a name outside the layers is its own point")
	}

	moe := &model.Config{Layers: 2, Experts: 4, ExpertsUsed: 2}
	for _, n := range append(names, Points(moe)...) {
		require.True(t, KnownPoint(n), n)
	}
	for _, n := range []string{"blocks.*.attn.hook_rot_q", "hook_pos_embed", "blocks.7.mlp.hook_expert_ids"} {
		require.True(t, KnownPoint(n), n)
	}
	for _, n := range []string{"blocks.1.hook_nope", "blocks.*.hook_pattern", "hook_resid_post", "blocks.0.logits", "blocks.x.hook_resid_post", "logit"} {
		require.False(t, KnownPoint(n), n)
	}
}

// Each family has the points its traits give it, layer by layer: a
// layer's points are all named before the next layer's.
func TestPointsFollowTheFamily(t *testing.T) {
	layer := func(c *model.Config) []Point {
		var ps []Point
		for _, name := range Points(c) {
			if l, p := SplitPoint(name); l == 1 {
				ps = append(ps, p)
			}
		}
		return ps
	}
	llama := &model.Config{Layers: 3, Pos: model.PosRope, MLP: model.MLPSwiGLU}
	gpt2 := &model.Config{Layers: 3, Pos: model.PosLearned, MLP: model.MLPGELU}
	moe := &model.Config{Layers: 3, Pos: model.PosRope, MLP: model.MLPSwiGLU, Experts: 4, ExpertsUsed: 2}
	require.Equal(t, []Point{ResidPre, LN1Scale, LN1Normalized, AttnQ, AttnK, AttnV, AttnRotQ, AttnRotK, AttnCacheK, AttnCacheV,
		AttnScores, AttnPattern, AttnZ, AttnOut, ResidMid, LN2Scale, LN2Normalized, MLPPre, MLPPreLinear, MLPPost, MLPOut, ResidPost}, layer(llama))
	require.Equal(t, []Point{ResidPre, LN1Scale, LN1Normalized, AttnQ, AttnK, AttnV, AttnCacheK, AttnCacheV,
		AttnScores, AttnPattern, AttnZ, AttnOut, ResidMid, LN2Scale, LN2Normalized, MLPPre, MLPPost, MLPOut, ResidPost}, layer(gpt2))
	require.Equal(t, []Point{ResidPre, LN1Scale, LN1Normalized, AttnQ, AttnK, AttnV, AttnRotQ, AttnRotK, AttnCacheK, AttnCacheV,
		AttnScores, AttnPattern, AttnZ, AttnOut, ResidMid, LN2Scale, LN2Normalized, MLPRouterLogits, MLPExpertIDs, MLPExpertWeights, MLPExpertOut,
		MLPOut, ResidPost}, layer(moe))
	names := Points(gpt2)
	require.Equal(t, []string{"hook_embed", "hook_pos_embed", "blocks.0.hook_resid_pre"}, names[:3])
	require.Equal(t, []string{"blocks.2.hook_resid_post", "ln_final.hook_scale", "ln_final.hook_normalized", "logits"}, names[len(names)-4:])
	for i, name := range names[1:] {
		prev, _ := SplitPoint(names[i])
		l, _ := SplitPoint(name)
		require.True(t, l >= prev || l == -1 && prev == 2, "%s follows %s", name, names[i])
	}
}

func TestShapesAndSharedValues(t *testing.T) {
	c := &model.Config{Layers: 2, DModel: 8, FFN: 24, Heads: 4, KVHeads: 2, HeadDim: 2, Vocab: 50, Experts: 6, ExpertsUsed: 2, Pos: model.PosRope}
	x := Extent{T: 3, Pos0: 5, LogitRows: 1}
	for name, want := range map[string][]int{
		"hook_embed":                       {3, 8},
		"blocks.1.ln1.hook_scale":          {3, 1},
		"blocks.0.attn.hook_q":             {3, 4, 2},
		"blocks.0.attn.hook_rot_k":         {3, 2, 2},
		"blocks.0.attn.cache_v":            {8, 2, 2},
		"blocks.0.attn.hook_pattern":       {4, 3, 8},
		"blocks.0.mlp.hook_pre_linear":     {3, 24},
		"blocks.0.mlp.hook_router_logits":  {3, 6},
		"blocks.0.mlp.hook_expert_weights": {3, 2},
		"blocks.0.mlp.hook_expert_out":     {3, 2, 8},
		"ln_final.hook_scale":              {1, 1},
		"ln_final.hook_normalized":         {1, 8},
		"logits":                           {1, 50},
		"blocks.0.logits":                  nil,
		"hook_nope":                        nil,
	} {
		require.Equal(t, want, ShapeOf(c, name, x), name)
	}

	for _, tc := range []struct {
		c    *model.Config
		name string
		pos0 int
		want string
	}{
		{c, "blocks.1.hook_resid_pre", 3, "blocks.0.hook_resid_post"},
		{c, "blocks.0.hook_resid_pre", 3, "hook_embed"},
		{&model.Config{Pos: model.PosLearned}, "blocks.0.hook_resid_pre", 0, ""}, // embedding plus positions
		{c, "blocks.1.attn.cache_k", 0, "blocks.1.attn.hook_rot_k"},
		{&model.Config{Pos: model.PosLearned}, "blocks.1.attn.cache_k", 0, "blocks.1.attn.hook_k"},
		{c, "blocks.1.attn.cache_v", 0, "blocks.1.attn.hook_v"},
		{c, "blocks.1.attn.cache_v", 4, ""}, // the cache holds earlier positions too
		{c, "blocks.1.hook_resid_mid", 0, ""},
	} {
		require.Equal(t, tc.want, SameAs(tc.c, tc.name, tc.pos0), "%s at %d", tc.name, tc.pos0)
	}
}

// The table is in stage order, and every point's name is unique.
func TestTableIsInStageOrder(t *testing.T) {
	tab := Table()
	require.True(t, slices.IsSortedFunc(tab, func(a, b Spec) int { return int(a.Stage) - int(b.Stage) }))
	seen := map[Point]bool{}
	for _, s := range tab {
		require.False(t, seen[s.Point], s.Point)
		seen[s.Point] = true
		require.NotNil(t, s.Shape, s.Point)
	}
}

func TestPointHintsNameTheFamilyOrTheNearMiss(t *testing.T) {
	gpt2 := &model.Config{Layers: 2, Pos: model.PosLearned, MLP: model.MLPGELU}
	llama := &model.Config{Layers: 2, Pos: model.PosRope, MLP: model.MLPSwiGLU}
	moe := &model.Config{Layers: 2, Pos: model.PosRope, MLP: model.MLPSwiGLU, Experts: 4, ExpertsUsed: 2}
	for _, tc := range []struct {
		c             *model.Config
		pattern, want string
	}{
		{gpt2, "blocks.*.attn.hook_rot_q", ": it has learned positions, not RoPE"},
		{gpt2, "blocks.0.mlp.hook_pre_linear", ": its MLP has no gate"},
		{llama, "hook_pos_embed", ": it has no learned positions"},
		{llama, "blocks.1.mlp.hook_expert_ids", ": it has no experts"},
		{moe, "blocks.*.mlp.hook_post", ": its MLP is a mixture of experts, with points mlp.hook_router_logits, mlp.hook_expert_ids, mlp.hook_expert_weights, mlp.hook_expert_out"},
		{llama, "blocks.5.hook_resid_post", ": layer 5 is past the model's last layer 1"},
		{llama, "blocks.*.hook_resid_pots", ": did you mean blocks.*.hook_resid_post?"},
		{llama, "blocks.1.hook_patern", ": did you mean blocks.1.attn.hook_pattern?"},
		{llama, "logit", ": did you mean logits?"},
		{llama, "blocks.*.something_else_entirely", ""},
	} {
		require.Equal(t, tc.want, PointHint(tc.c, tc.pattern), tc.pattern)
	}
}
