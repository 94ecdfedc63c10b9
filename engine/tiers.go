package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/trace"
)

// Placement says which tier holds each part of a model split over several
// backends (tiers): the embedding, each layer's home (its weights, KV cache
// and scratch) and the output head. Tiers are indices into the backends
// given to NewTieredEngine. The layer program runs each layer on its home
// tier and hands the residual stream on where the tier changes.
type Placement struct {
	Embed  int   // the token (and learned position) embeddings
	Layers []int // each layer's home tier
	Head   int   // the final norm and the LM head
}

// OneTier places the whole model of the given layers on tier 0.
func OneTier(layers int) Placement { return Placement{Layers: make([]int, max(layers, 0))} }

// Tiers is the number of tiers the placement uses (the largest index + 1).
func (p Placement) Tiers() int {
	n := max(p.Embed, p.Head)
	for _, t := range p.Layers {
		n = max(n, t)
	}
	return n + 1
}

// String writes each run of layers with its tier, TIER:FIRST-LAST
// ("0:0-13,1:14-27"), and the embedding's and head's tiers when they are
// not the first and last layers'. Plan.Flag writes devices instead, as
// --placement takes them.
func (p Placement) String() string {
	var parts []string
	for _, s := range p.segments() {
		parts = append(parts, fmt.Sprintf("%d:%d-%d", s.tier, s.first, s.last))
	}
	out := strings.Join(parts, ",")
	if n := len(p.Layers); n > 0 && (p.Embed != p.Layers[0] || p.Head != p.Layers[n-1]) {
		out += fmt.Sprintf(" (embedding on %d, head on %d)", p.Embed, p.Head)
	}
	return out
}

// segment is a run of consecutive layers on one tier.
type segment struct{ tier, first, last int }

func (p Placement) segments() []segment {
	var out []segment
	for l, t := range p.Layers {
		if n := len(out); n > 0 && out[n-1].tier == t {
			out[n-1].last = l
			continue
		}
		out = append(out, segment{t, l, l})
	}
	return out
}

// check refuses a placement that does not fit the model or the backends:
// every part on an existing tier, and every tier holding something.
func (p Placement) check(c *model.Config, tiers int) error {
	if len(p.Layers) != c.Layers {
		return fmt.Errorf("engine: the placement has %d layers; the model has %d", len(p.Layers), c.Layers)
	}
	used := make([]bool, tiers)
	mark := func(what string, t int) error {
		if t < 0 || t >= tiers {
			return fmt.Errorf("engine: the placement puts %s on tier %d; there are %d tiers (0 to %d)", what, t, tiers, tiers-1)
		}
		used[t] = true
		return nil
	}
	if err := mark("the embedding", p.Embed); err != nil {
		return err
	}
	if err := mark("the output head", p.Head); err != nil {
		return err
	}
	for l, t := range p.Layers {
		if err := mark(fmt.Sprintf("layer %d", l), t); err != nil {
			return err
		}
	}
	if i := slices.Index(used, false); i >= 0 {
		return fmt.Errorf("engine: tier %d holds nothing in the placement %s (embedding on %d, head on %d)", i, p, p.Embed, p.Head)
	}
	return nil
}

// tierOfPoint is the tier where a point is computed: its layer's, the
// embedding's before the layers, the head's after them.
func (p Placement) tierOfPoint(name string) int {
	if layer, _ := trace.SplitPoint(name); layer >= 0 {
		return p.Layers[layer]
	}
	if s, _ := trace.SpecOf(name); s.Stage == trace.BeforeLayers {
		return p.Embed
	}
	return p.Head
}

// role is what a tier holds, which decides the scratch it needs.
type role struct{ embed, layers, head bool }

func (p Placement) role(tier int) role {
	return role{embed: p.Embed == tier, layers: slices.Contains(p.Layers, tier), head: p.Head == tier}
}

// moveTo makes tier the running one and returns where the residual stream
// x is on it. Only the residual stream is live across a layer boundary
// (each layer's KV cache stays on its home tier), so it alone moves: read
// back to host memory from the tier running now, then written to the next
// tier's residual buffer. The read syncs the tier it leaves; that costs one
// round trip per boundary, t*d_model floats.
func (r *Run) moveTo(tier int, x backend.Tensor) (backend.Tensor, bool) {
	if r.err != nil {
		return nil, false
	}
	if tier == r.tier {
		return x, true
	}
	n := r.l.t * r.s.e.Model.DModel
	if cap(r.hostScratch) < n {
		r.hostScratch = make([]float32, n)
	}
	host := r.hostScratch[:n]
	if err := r.st.Read(x, 0, host); err != nil {
		r.fail(fmt.Errorf("engine: handing the residual stream from tier %d to tier %d: %w", r.tier, tier, err))
		return nil, false
	}
	r.tier, r.st, r.scratch = tier, r.s.tiers[tier].st, r.bufs[tier]
	r.st.Write(r.x, 0, host)
	return r.x, true
}
