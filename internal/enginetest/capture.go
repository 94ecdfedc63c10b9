package enginetest

import (
	"math/rand/v2"

	"github.com/stratalab/strata/engine"
)

// soakGlobs are the capture globs a random plan picks from: everything, one
// kind of point, one layer, the KV cache, the ends of the program.
var soakGlobs = []string{"*", "blocks.*.attn.hook_pattern", "blocks.*.hook_resid_post", "blocks.1.*",
	"blocks.*.attn.cache_?", "hook_embed", "logits", "blocks.*.mlp.*", "ln_final.hook_normalized"}

// RandomCapture is a soak's capture plan: nothing a quarter of the time,
// else one glob over the layers from a random one to the last or over that
// layer alone.
func RandomCapture(r *rand.Rand, layers int) engine.Capture {
	if r.IntN(4) == 0 {
		return engine.Capture{}
	}
	c := engine.Capture{Globs: []string{soakGlobs[r.IntN(len(soakGlobs))]}, FirstLayer: r.IntN(layers), LastLayer: -1}
	if r.IntN(2) == 0 {
		c.LastLayer = c.FirstLayer
	}
	return c
}
