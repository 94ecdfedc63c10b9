package enginetest

import (
	"math/rand/v2"
	"strings"

	"github.com/stratalab/strata/engine"
)

// soakGlobs are the capture globs a random plan picks from: everything, one
// kind of point, one layer, the KV cache, the ends of the program.
var soakGlobs = []string{"*", "blocks.*.attn.hook_pattern", "blocks.*.hook_resid_post", "blocks.1.*",
	"blocks.*.attn.cache_?", "hook_embed", "logits", "blocks.*.mlp.*", "ln_final.hook_normalized"}

// RandomCapture is a soak's capture plan: nothing a quarter of the time,
// else one glob over the layers from a random one to the last or over that
// layer alone, a range holding layer 1 for "blocks.1.*" and the whole model
// for points in no layer (Validate refuses a range that keeps none of the
// points asked for).
func RandomCapture(r *rand.Rand, layers int) engine.Capture {
	if r.IntN(4) == 0 {
		return engine.Capture{}
	}
	g := soakGlobs[r.IntN(len(soakGlobs))]
	c := engine.Capture{Globs: []string{g}, LastLayer: -1}
	switch {
	case g == "blocks.1.*":
		c.FirstLayer = r.IntN(2)
		if r.IntN(2) == 0 {
			c.LastLayer = 1
		}
	case g == "*" || strings.HasPrefix(g, "blocks."):
		c.FirstLayer = r.IntN(layers)
		if r.IntN(2) == 0 {
			c.LastLayer = c.FirstLayer
		}
	}
	return c
}
