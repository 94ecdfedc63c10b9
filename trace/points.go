package trace

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/stratalab/strata/model"
)

// Point is a capture point: its name within a layer (a layer's point is
// "blocks.N." + Point, see LayerPoint), or the whole name of a point
// before or after the layers. Names follow TransformerLens.
//
// Layouts: residual-width points are [T, DModel]; hook_q, hook_rot_q and
// hook_z are [T, Heads, HeadDim]; hook_k, hook_v, hook_rot_k are
// [T, KVHeads, HeadDim]; hook_attn_scores and hook_pattern are
// [Heads, T, Pos0+T]; cache_k and cache_v are [Pos0+T, KVHeads, HeadDim],
// the whole cache after this prefill's store; MLP points are [T, FFN].
// ln_final.hook_scale, ln_final.hook_normalized and logits have a row for
// the last position only, unless the prefill computes every position's
// logits (LogitsAll, nb.AllLogits).
//
// hook_q and hook_k are the projections after bias and (qwen3) the
// per-head Q/K RMSNorm, before RoPE; hook_rot_q and hook_rot_k are after
// RoPE, as attention uses them and as the cache stores K. Their head
// dimensions are in the GGUF's order: where RoPE turns adjacent pairs
// (model.RopeAdjacent: llama and its kin), llama.cpp's converter permuted
// the Q and K rows, so dimension 2i of a head is dimension i of the
// Hugging Face model's (and TransformerLens's) and 2i+1 is i+HeadDim/2.
// Scores, patterns, hook_z and everything after are the same in either
// order. The hook_scale
// points [T, 1] are what each row is divided by, sqrt(mean(x^2) + eps) (or
// the variance's for a LayerNorm), as TransformerLens's; a hook there
// changes the division (freezing a norm). The hook_normalized points
// include the norm's gain (TransformerLens folds it into the next weights
// instead). hook_attn_scores are scaled by 1/sqrt(HeadDim) and
// masked with -Inf above the diagonal. mlp.hook_pre is the gate projection
// before SiLU, mlp.hook_pre_linear the up projection, mlp.hook_post their
// SwiGLU product.
//
// A model with learned positions (GPT-2) has hook_pos_embed [T, DModel], the
// position embeddings added to hook_embed, and no hook_rot_q or hook_rot_k;
// its hook_normalized points are LayerNorm's, bias included. With a GELU
// MLP, mlp.hook_pre is the up projection (bias included) and mlp.hook_post
// its GELU; there is no hook_pre_linear.
//
// A mixture of experts has, in place of the MLP points, the router's logits
// [T, Experts], each token's chosen experts [T, ExpertsUsed] (ids as
// float32, best first; -1 for a slot no expert of positive probability
// fills) and their weights, and the chosen experts' outputs before
// weighting [T, ExpertsUsed, DModel]. Editing the logits (to -Inf: never
// chosen; to a large value: always) ablates or forces an expert.
//
// Gemma: hook_embed is the embedding times sqrt(d_model), as it enters the
// residual stream; hook_attn_out and hook_mlp_out are after the norms that
// Gemma applies to each block's outputs (TransformerLens's ln1_post and
// ln2_post), so they are what joins the residual stream; mlp.hook_pre is the
// gate before GELU; hook_attn_scores are after the soft-cap and the sliding
// window's mask; logits are after the final soft-cap.
type Point string

// The capture points, in the order of the table (see Table).
const (
	Embed    Point = "hook_embed"
	PosEmbed Point = "hook_pos_embed"

	ResidPre          Point = "hook_resid_pre"
	LN1Scale          Point = "ln1.hook_scale"
	LN1Normalized     Point = "ln1.hook_normalized"
	AttnQ             Point = "attn.hook_q"
	AttnK             Point = "attn.hook_k"
	AttnV             Point = "attn.hook_v"
	AttnRotQ          Point = "attn.hook_rot_q"
	AttnRotK          Point = "attn.hook_rot_k"
	AttnCacheK        Point = "attn.cache_k"
	AttnCacheV        Point = "attn.cache_v"
	AttnScores        Point = "attn.hook_attn_scores"
	AttnPattern       Point = "attn.hook_pattern"
	AttnZ             Point = "attn.hook_z"
	AttnOut           Point = "hook_attn_out"
	ResidMid          Point = "hook_resid_mid"
	LN2Scale          Point = "ln2.hook_scale"
	LN2Normalized     Point = "ln2.hook_normalized"
	MLPPre            Point = "mlp.hook_pre"
	MLPPreLinear      Point = "mlp.hook_pre_linear"
	MLPPost           Point = "mlp.hook_post"
	MLPRouterLogits   Point = "mlp.hook_router_logits"
	MLPExpertIDs      Point = "mlp.hook_expert_ids"
	MLPExpertWeights  Point = "mlp.hook_expert_weights"
	MLPExpertOut      Point = "mlp.hook_expert_out"
	MLPOut            Point = "hook_mlp_out"
	ResidPost         Point = "hook_resid_post"
	LNFinalScale      Point = "ln_final.hook_scale"
	LNFinalNormalized Point = "ln_final.hook_normalized"
	Logits            Point = "logits"
)

// Stage is the part of a prefill a point is in.
type Stage uint8

const (
	BeforeLayers Stage = iota // the embedding
	InLayer                   // each layer: the point is named per layer
	AfterLayers               // the final norm and the LM head
)

// Needs is the trait a model must have for a point to exist.
type Needs uint8

const (
	Always           Needs = iota
	LearnedPositions       // positions are a learned embedding (GPT-2)
	Rope                   // queries and keys are rotated
	DenseMLP               // the MLP is one, not a mixture of experts
	GatedMLP               // the MLP is one with a gate (SwiGLU, GeGLU)
	Experts                // the MLP is a mixture of experts
)

// Of reports whether the model has the trait.
func (n Needs) Of(c *model.Config) bool {
	switch n {
	case LearnedPositions:
		return c.Pos == model.PosLearned
	case Rope:
		return c.Pos == model.PosRope
	case DenseMLP:
		return !c.MoE()
	case GatedMLP:
		return !c.MoE() && c.MLP.Gated()
	case Experts:
		return c.MoE()
	}
	return true
}

// lack says why a model without the trait has no such point.
func (n Needs) lack(c *model.Config) string {
	switch {
	case n.Of(c):
		return ""
	case n == Rope:
		return "it has learned positions, not RoPE"
	case n == LearnedPositions:
		return "it has no learned positions"
	case n == Experts:
		return "it has no experts"
	case c.MoE(): // DenseMLP, GatedMLP
		return "its MLP is a mixture of experts, with points " + strings.Join(pointsNeeding(Experts), ", ")
	}
	return "its MLP has no gate"
}

// Extent is what a point's shape depends on beyond the model: a prefill of
// T tokens at position Pos0, whose LM head computes LogitRows positions.
type Extent struct{ T, Pos0, LogitRows int }

// Spec is a row of the table of capture points.
type Spec struct {
	Point Point
	Stage Stage
	Needs Needs
	// Shape is the point's shape in a prefill.
	Shape func(c *model.Config, x Extent) []int
	// SameAs, unless nil, names the earlier point (in full) whose values
	// this one has in a prefill from pos0 when no hook sits at it, or ""
	// where none has: the layout gives them one place, never copied.
	SameAs func(c *model.Config, layer, pos0 int) string
}

// table is the capture points in the order a prefill reaches them: the
// layer program (engine/program.go) reaches each point a model has, and
// only those, in this order, when it captures them all (a test dry-runs
// it to check).
var table = []Spec{
	{Embed, BeforeLayers, Always, rows, nil},
	{PosEmbed, BeforeLayers, LearnedPositions, rows, nil},

	{ResidPre, InLayer, Always, rows, residIn},
	{LN1Scale, InLayer, Always, rowScale, nil},
	{LN1Normalized, InLayer, Always, rows, nil},
	{AttnQ, InLayer, Always, queryHeads, nil},
	{AttnK, InLayer, Always, kvHeads, nil},
	{AttnV, InLayer, Always, kvHeads, nil},
	{AttnRotQ, InLayer, Rope, queryHeads, nil},
	{AttnRotK, InLayer, Rope, kvHeads, nil},
	{AttnCacheK, InLayer, Always, cache, keysCached},
	{AttnCacheV, InLayer, Always, cache, valuesCached},
	{AttnScores, InLayer, Always, scores, nil},
	{AttnPattern, InLayer, Always, scores, nil},
	{AttnZ, InLayer, Always, queryHeads, nil},
	{AttnOut, InLayer, Always, rows, nil},
	{ResidMid, InLayer, Always, rows, nil},
	{LN2Scale, InLayer, Always, rowScale, nil},
	{LN2Normalized, InLayer, Always, rows, nil},
	{MLPPre, InLayer, DenseMLP, hidden, nil},
	{MLPPreLinear, InLayer, GatedMLP, hidden, nil},
	{MLPPost, InLayer, DenseMLP, hidden, nil},
	{MLPRouterLogits, InLayer, Experts, router, nil},
	{MLPExpertIDs, InLayer, Experts, chosen, nil},
	{MLPExpertWeights, InLayer, Experts, chosen, nil},
	{MLPExpertOut, InLayer, Experts, chosenOut, nil},
	{MLPOut, InLayer, Always, rows, nil},
	{ResidPost, InLayer, Always, rows, nil},

	{LNFinalScale, AfterLayers, Always, headScale, nil},
	{LNFinalNormalized, AfterLayers, Always, headRows, nil},
	{Logits, AfterLayers, Always, logits, nil},
}

// Shape rules of the table.
func rows(c *model.Config, x Extent) []int       { return []int{x.T, c.DModel} }
func rowScale(_ *model.Config, x Extent) []int   { return []int{x.T, 1} }
func queryHeads(c *model.Config, x Extent) []int { return []int{x.T, c.Heads, c.HeadDim} }
func kvHeads(c *model.Config, x Extent) []int    { return []int{x.T, c.KVHeads, c.HeadDim} }
func cache(c *model.Config, x Extent) []int      { return []int{x.Pos0 + x.T, c.KVHeads, c.HeadDim} }
func scores(c *model.Config, x Extent) []int     { return []int{c.Heads, x.T, x.Pos0 + x.T} }
func hidden(c *model.Config, x Extent) []int     { return []int{x.T, c.FFN} }
func router(c *model.Config, x Extent) []int     { return []int{x.T, c.Experts} }
func chosen(c *model.Config, x Extent) []int     { return []int{x.T, c.ExpertsUsed} }
func chosenOut(c *model.Config, x Extent) []int  { return []int{x.T, c.ExpertsUsed, c.DModel} }
func headScale(_ *model.Config, x Extent) []int  { return []int{x.LogitRows, 1} }
func headRows(c *model.Config, x Extent) []int   { return []int{x.LogitRows, c.DModel} }
func logits(c *model.Config, x Extent) []int     { return []int{x.LogitRows, c.Vocab} }

// residIn: the residual stream entering a layer is the one leaving the
// layer before, or the embedding (without learned positions, which are
// added to it).
func residIn(c *model.Config, layer, _ int) string {
	switch {
	case layer > 0:
		return LayerPoint(layer-1, ResidPost)
	case c.Pos != model.PosLearned:
		return string(Embed)
	}
	return ""
}

// keysCached and valuesCached: the KV cache of a prefill from position 0
// is its keys (rotated, with RoPE) and values. TransformerLens's cache
// shares their storage too.
func keysCached(c *model.Config, layer, pos0 int) string {
	switch {
	case pos0 != 0:
		return ""
	case c.Pos == model.PosRope:
		return LayerPoint(layer, AttnRotK)
	}
	return LayerPoint(layer, AttnK)
}

func valuesCached(_ *model.Config, layer, pos0 int) string {
	if pos0 != 0 {
		return ""
	}
	return LayerPoint(layer, AttnV)
}

// Table is the capture points of every model family, in the order a
// prefill reaches them.
func Table() []Spec { return slices.Clone(table) }

// specs finds a point's row.
var specs = func() map[Point]*Spec {
	m := map[Point]*Spec{}
	for i := range table {
		m[table[i].Point] = &table[i]
	}
	return m
}()

// SpecOf is the table's row of the named point (a full name, with its
// layer), and false for a name that is no point.
func SpecOf(name string) (Spec, bool) {
	layer, p := SplitPoint(name)
	s, ok := specs[p]
	if !ok || (layer >= 0) != (s.Stage == InLayer) {
		return Spec{}, false
	}
	return *s, true
}

func pointsNeeding(n Needs) []string {
	var ps []string
	for _, s := range table {
		if s.Needs == n {
			ps = append(ps, string(s.Point))
		}
	}
	return ps
}

// Points lists every capture point name of a model, in the order a prefill
// reaches them; none for a nil config.
func Points(c *model.Config) []string {
	if c == nil {
		return nil
	}
	var names []string
	add := func(stage Stage, layer int) {
		for _, s := range table {
			if s.Stage == stage && s.Needs.Of(c) {
				names = append(names, name(stage, layer, s.Point))
			}
		}
	}
	add(BeforeLayers, -1)
	for l := range c.Layers {
		add(InLayer, l)
	}
	add(AfterLayers, -1)
	return names
}

// KnownPoint says whether name (a layer's point with its number or with *)
// is a capture point of some model family, whether or not a given model
// has it.
func KnownPoint(name string) bool {
	if rest, ok := strings.CutPrefix(name, "blocks.*."); ok {
		name = LayerPoint(0, Point(rest))
	}
	_, ok := SpecOf(name)
	return ok
}

// IsAttentionMap reports whether name is a layer's hook_attn_scores or
// hook_pattern: [heads, queries, keys], the one layout whose first axis is
// not the positions.
func IsAttentionMap(name string) bool {
	_, local := SplitPoint(name)
	return local == AttnScores || local == AttnPattern
}

// LayerPoint names point p of layer l, e.g. LayerPoint(3, AttnPattern) is
// "blocks.3.attn.hook_pattern".
func LayerPoint(l int, p Point) string { return "blocks." + strconv.Itoa(l) + "." + string(p) }

// name is the full name of point p of the given stage: a layer's point,
// or p itself outside the layers.
func name(stage Stage, layer int, p Point) string {
	if stage == InLayer {
		return LayerPoint(layer, p)
	}
	return string(p)
}

// SplitPoint returns the layer of a per-layer point name and its
// layer-local part; layer is -1 for a name outside the layers (hook_embed,
// logits), which is its own point.
func SplitPoint(name string) (layer int, p Point) {
	l, local, ok := splitLayer(name)
	if !ok || l < 0 {
		return -1, Point(name)
	}
	return l, Point(local)
}

// ShapeOf is the shape the named point has in a prefill of model c, nil
// for a name that is no point.
func ShapeOf(c *model.Config, name string, x Extent) []int {
	s, ok := SpecOf(name)
	if !ok {
		return nil
	}
	return s.Shape(c, x)
}

// SameAs is the earlier point whose values the named one has in a prefill
// from pos0 when no hook sits at it, or "" (see Spec.SameAs).
func SameAs(c *model.Config, name string, pos0 int) string {
	s, ok := SpecOf(name)
	if !ok || s.SameAs == nil {
		return ""
	}
	layer, _ := SplitPoint(name)
	return s.SameAs(c, layer, pos0)
}

// PointHint says why pattern names no point of the model, to follow an
// error that says so: ": it has no experts" for a point of other families,
// ": did you mean blocks.*.hook_resid_post?" for a near miss, or "" (and
// for a nil config).
func PointHint(c *model.Config, pattern string) string {
	if c == nil {
		return ""
	}
	layer, local := SplitPoint(pattern)
	if layer >= c.Layers {
		return fmt.Sprintf(": layer %d is past the model's last layer %d", layer, c.Layers-1)
	}
	if rest, ok := strings.CutPrefix(pattern, "blocks."); ok && layer < 0 { // blocks.*.x: SplitPoint wants a number
		if _, p, ok := strings.Cut(rest, "."); ok {
			local = Point(p)
		}
	}
	if s, ok := specs[local]; ok {
		if why := s.Needs.lack(c); why != "" {
			return ": " + why
		}
	}
	// Suggest only near misses (a typo, not another point), compared with
	// and without the point's attn. or mlp. part, and named in full: a
	// layer's point with the pattern's own blocks.N. or blocks.*. prefix.
	prefix := "blocks.*."
	if strings.HasPrefix(pattern, "blocks.") && strings.HasSuffix(pattern, string(local)) {
		prefix = strings.TrimSuffix(pattern, string(local))
	}
	best, bestD := "", 4
	for _, s := range table {
		if !s.Needs.Of(c) {
			continue
		}
		q := string(s.Point)
		d := editDistance(string(local), q)
		if _, last, ok := strings.Cut(q, "."); ok {
			d = min(d, editDistance(string(local), last))
		}
		if d < bestD {
			best, bestD = q, d
			if s.Stage == InLayer {
				best = prefix + q
			}
		}
	}
	if best != "" && best != pattern {
		return fmt.Sprintf(": did you mean %s?", best)
	}
	return ""
}

// editDistance is Levenshtein's distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
