package engine

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/stratalab/strata/model"
)

// Capture point names follow TransformerLens. Per layer N they are
// "blocks.N." + one of the layer points below.
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
// Gemma: hook_embed is the embedding times sqrt(d_model), as it enters the
// residual stream; hook_attn_out and hook_mlp_out are after the norms that
// Gemma applies to each block's outputs (TransformerLens's ln1_post and
// ln2_post), so they are what joins the residual stream; mlp.hook_pre is the
// gate before GELU; hook_attn_scores are after the soft-cap and the sliding
// window's mask; logits are after the final soft-cap.
var layerPoints = []string{
	"hook_resid_pre",
	"ln1.hook_scale",
	"ln1.hook_normalized",
	"attn.hook_q",
	"attn.hook_k",
	"attn.hook_v",
	"attn.hook_rot_q",
	"attn.hook_rot_k",
	"attn.cache_k",
	"attn.cache_v",
	"attn.hook_attn_scores",
	"attn.hook_pattern",
	"attn.hook_z",
	"hook_attn_out",
	"hook_resid_mid",
	"ln2.hook_scale",
	"ln2.hook_normalized",
	"mlp.hook_pre",
	"mlp.hook_pre_linear",
	"mlp.hook_post",
	"hook_mlp_out",
	"hook_resid_post",
}

// moePoints replace a mixture of experts' MLP points: the router's logits
// [T, Experts], each token's chosen experts [T, ExpertsUsed] (ids as
// float32, best first; -1 for a slot no expert of positive probability
// fills) and their weights, and the chosen experts' outputs
// before weighting [T, ExpertsUsed, DModel]. Editing the logits (to -Inf:
// never chosen; to a large value: always) ablates or forces an expert.
var moePoints = []string{"mlp.hook_router_logits", "mlp.hook_expert_ids", "mlp.hook_expert_weights", "mlp.hook_expert_out"}

// Points lists every capture point name of a model, in the order a prefill
// reaches them. A model with learned positions has hook_pos_embed and no
// rotated Q and K; one with a plain (ungated) MLP has no hook_pre_linear.
func Points(c *model.Config) []string {
	names := []string{"hook_embed"}
	if c.Pos == model.PosLearned {
		names = append(names, "hook_pos_embed")
	}
	for l := 0; l < c.Layers; l++ {
		for _, p := range layerPoints {
			if (c.Pos != model.PosRope && (p == "attn.hook_rot_q" || p == "attn.hook_rot_k")) ||
				(!c.MLP.Gated() && p == "mlp.hook_pre_linear") {
				continue
			}
			if c.MoE() && strings.HasPrefix(p, "mlp.") {
				continue
			}
			names = append(names, LayerPoint(l, p))
			if c.MoE() && p == "ln2.hook_normalized" {
				for _, m := range moePoints {
					names = append(names, LayerPoint(l, m))
				}
			}
		}
	}
	return append(names, finalPoints...)
}

// finalPoints follow the last layer.
var finalPoints = []string{"ln_final.hook_scale", "ln_final.hook_normalized", "logits"}

// KnownPoint says whether name (a layer's point with its number or with *)
// is a capture point of some model family, whether or not a given model
// has it.
func KnownPoint(name string) bool {
	if rest, ok := strings.CutPrefix(name, "blocks.*."); ok {
		name = "blocks.0." + rest
	}
	if l, local := SplitPoint(name); l >= 0 {
		return slices.Contains(layerPoints, local) || slices.Contains(moePoints, local)
	}
	return name == "hook_embed" || name == "hook_pos_embed" || slices.Contains(finalPoints, name)
}

// LayerPoint names point p of layer l, e.g. LayerPoint(3, "attn.hook_pattern").
func LayerPoint(l int, p string) string { return "blocks." + strconv.Itoa(l) + "." + p }

// SplitPoint returns the layer of a per-layer point name and its layer-local
// part; layer is -1 for hook_embed, ln_final.hook_normalized and logits.
func SplitPoint(name string) (layer int, local string) {
	rest, ok := strings.CutPrefix(name, "blocks.")
	if !ok {
		return -1, name
	}
	num, local, ok := strings.Cut(rest, ".")
	if !ok {
		return -1, name
	}
	l, err := strconv.Atoi(num)
	if err != nil {
		return -1, name
	}
	return l, local
}

// shapeOf is the shape a point has in a prefill of t tokens at pos0;
// logitRows is how many positions the tail computes.
func shapeOf(c *model.Config, name string, t, pos0, logitRows int) []int {
	_, local := SplitPoint(name)
	keys := pos0 + t
	switch local {
	case "hook_embed", "hook_pos_embed", "hook_resid_pre", "ln1.hook_normalized", "hook_attn_out", "hook_resid_mid",
		"ln2.hook_normalized", "hook_mlp_out", "hook_resid_post":
		return []int{t, c.DModel}
	case "attn.hook_q", "attn.hook_rot_q", "attn.hook_z":
		return []int{t, c.Heads, c.HeadDim}
	case "attn.hook_k", "attn.hook_v", "attn.hook_rot_k":
		return []int{t, c.KVHeads, c.HeadDim}
	case "attn.cache_k", "attn.cache_v":
		return []int{keys, c.KVHeads, c.HeadDim}
	case "attn.hook_attn_scores", "attn.hook_pattern":
		return []int{c.Heads, t, keys}
	case "mlp.hook_pre", "mlp.hook_pre_linear", "mlp.hook_post":
		return []int{t, c.FFN}
	case "mlp.hook_router_logits":
		return []int{t, c.Experts}
	case "mlp.hook_expert_ids", "mlp.hook_expert_weights":
		return []int{t, c.ExpertsUsed}
	case "mlp.hook_expert_out":
		return []int{t, c.ExpertsUsed, c.DModel}
	case "ln1.hook_scale", "ln2.hook_scale":
		return []int{t, 1}
	case "ln_final.hook_scale":
		return []int{logitRows, 1}
	case "ln_final.hook_normalized":
		return []int{logitRows, c.DModel}
	case "logits":
		return []int{logitRows, c.Vocab}
	}
	return nil
}

func elements(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Capture selects capture points by glob (path.Match syntax over the full
// names, e.g. "blocks.*.attn.hook_pattern") and, for per-layer points, a
// layer range [FirstLayer, LastLayer]; LastLayer -1 means the last layer.
type Capture struct {
	Globs      []string
	FirstLayer int
	LastLayer  int
}

// CaptureAll selects every point of every layer.
func CaptureAll() Capture { return Capture{Globs: []string{"*"}, LastLayer: -1} }

// CaptureOf selects the points matching globs in every layer.
func CaptureOf(globs ...string) Capture { return Capture{Globs: globs, LastLayer: -1} }

// Validate checks the globs' syntax, that each matches some point of the
// model, and that the layer range lies within the model's layers and
// selects at least one (with no globs too: a range asked for and ignored
// would look like one obeyed).
func (c Capture) Validate(m *model.Config) error {
	if err := c.validateLayers(m.Layers); err != nil {
		return err
	}
	all := Points(m)
	for _, g := range c.Globs {
		if _, err := path.Match(g, ""); err != nil {
			return fmt.Errorf("capture: bad pattern %q: %w", g, err)
		}
		found := false
		for _, n := range all {
			if ok, _ := path.Match(g, n); ok {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("capture: pattern %q matches no capture point of this %s model%s (strata info --points lists them)", g, m.Arch, pointHint(m, g))
		}
	}
	return nil
}

// pointHint says why a pattern matches no point of the model, when its
// point belongs to other families, or which point it is nearest to.
func pointHint(m *model.Config, pattern string) string {
	layer, local := SplitPoint(pattern)
	if layer >= m.Layers {
		return fmt.Sprintf(": layer %d is past the model's last layer %d", layer, m.Layers-1)
	}
	if strings.HasPrefix(pattern, "blocks.") && local == pattern { // blocks.*.x: SplitPoint wants a number
		if _, rest, ok := strings.Cut(strings.TrimPrefix(pattern, "blocks."), "."); ok {
			local = rest
		}
	}
	switch {
	case (local == "attn.hook_rot_q" || local == "attn.hook_rot_k") && m.Pos != model.PosRope:
		return ": it has learned positions, not RoPE"
	case local == "mlp.hook_pre_linear" && !m.MLP.Gated():
		return ": its MLP has no gate"
	case strings.HasPrefix(local, "mlp.hook_") && m.MoE() && !slices.Contains(moePoints, local):
		return fmt.Sprintf(": its MLP is a mixture of experts, with points %s", strings.Join(moePoints, ", "))
	case slices.Contains(moePoints, local) && !m.MoE():
		return ": it has no experts"
	case local == "hook_pos_embed" && m.Pos != model.PosLearned:
		return ": it has no learned positions"
	}
	// Suggest only near misses (a typo, not another point), compared with
	// and without the point's attn. or mlp. part, and named in full: a
	// layer's point with the pattern's own blocks.N. or blocks.*. prefix.
	prefix := "blocks.*."
	if strings.HasPrefix(pattern, "blocks.") && strings.HasSuffix(pattern, local) {
		prefix = strings.TrimSuffix(pattern, local)
	}
	best, bestD := "", 4
	for _, p := range Points(m) {
		l, q := SplitPoint(p)
		d := editDistance(local, q)
		if _, last, ok := strings.Cut(q, "."); ok {
			d = min(d, editDistance(local, last))
		}
		if d < bestD {
			best, bestD = q, d
			if l >= 0 {
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

func (c Capture) validateLayers(layers int) error {
	last := c.LastLayer
	if last == -1 {
		last = layers - 1
	}
	rng := fmt.Sprintf("capture: layer range %d..%d", c.FirstLayer, c.LastLayer)
	if c.LastLayer == -1 {
		rng = fmt.Sprintf("capture: layer range %d..last", c.FirstLayer)
	}
	switch {
	case c.FirstLayer < 0:
		return fmt.Errorf("%s: the first layer %d is negative (layers are 0..%d)", rng, c.FirstLayer, layers-1)
	case c.LastLayer < -1:
		return fmt.Errorf("%s: the last layer %d is negative (layers are 0..%d; -1 means the last)", rng, c.LastLayer, layers-1)
	case c.FirstLayer >= layers:
		return fmt.Errorf("%s selects no layer: the model has %d layers, 0..%d", rng, layers, layers-1)
	case last >= layers:
		return fmt.Errorf("%s: layer %d is past the model's last layer %d", rng, last, layers-1)
	case last < c.FirstLayer:
		return fmt.Errorf("%s selects no layer: the last layer %d is before the first %d", rng, last, c.FirstLayer)
	}
	return nil
}

// Selects reports whether the capture keeps the named point.
func (c Capture) Selects(name string) bool {
	if l, _ := SplitPoint(name); l >= 0 && (l < c.FirstLayer || (c.LastLayer >= 0 && l > c.LastLayer)) {
		return false
	}
	for _, g := range c.Globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}
