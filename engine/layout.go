package engine

import (
	"runtime"
	"slices"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/trace"
)

// layout is the plan of one prefill's memory: the sizes of its scratch and
// where each captured point goes. Captured points are packed in program
// order into arenas, one per layer (and one each before and after the
// layers; attention scores and patterns each in one of their own), split
// where one would pass arenaCap, so that a trace comes back
// in a few downloads and a step-wise run downloads each layer once.
type layout struct {
	t, pos0, keys, logitRows int
	// lens are the lengths of a batch's prompts, whose rows are packed
	// in order into the t rows; headRows are each one's LM-head rows. A
	// single prompt is a batch of one.
	lens, headRows []int
	// prompt0 is the batch's index of the first prompt, in a micro-batch.
	prompt0         int
	materialize     []bool // per layer: scores and pattern needed
	slots           map[string]slot
	order           []string
	index           map[string]int // every point's place in program order
	arenas          []int          // each arena's size in elements
	arenaPoints     []string       // each arena's first point
	captureElements int
}

// arenaCap bounds an arena unless one point is larger: 128 MiB, the largest
// storage buffer every Vulkan device must support.
const arenaCap = 1 << 25

// slot is a captured point: its shape, and where it lies in which arena.
// An alias shares the slot of an earlier point that holds the same values
// (trace.SameAs), so that it is never copied.
type slot struct {
	shape      []int
	arena, off int
	alias      bool
}

func newLayout(c *model.Config, t, pos0 int, o Options) *layout {
	return packedLayout(c, []int{t}, pos0, o)
}

// packedLayout is the layout of a batch of prompts of the given lengths,
// packed row after row.
func packedLayout(c *model.Config, lens []int, pos0 int, o Options) *layout {
	t := 0
	for _, n := range lens {
		t += n
	}
	l := &layout{t: t, pos0: pos0, keys: pos0 + t, lens: slices.Clone(lens), slots: map[string]slot{}, index: map[string]int{}}
	// The points after the layers are the LM head's rows.
	afterLayers := slices.ContainsFunc(trace.Table(), func(s trace.Spec) bool {
		return s.Stage == trace.AfterLayers && o.Capture.Selects(string(s.Point))
	})
	for _, n := range lens {
		rows := 0
		switch {
		case o.Logits == LogitsLast:
			rows = 1
		case o.Logits == LogitsAll || afterLayers:
			rows = n
		}
		l.headRows = append(l.headRows, rows)
		l.logitRows += rows
	}
	l.materialize = make([]bool, c.Layers)
	arenaLayer, lastAlone := 0, false
	for i, name := range trace.Points(c) {
		l.index[name] = i
		layer, p := trace.SplitPoint(name)
		captured := o.Capture.Selects(name)
		if attentionMap(p) && (captured || hooked(o.Hooks, name)) {
			l.materialize[layer] = true
		}
		if !captured {
			continue
		}
		spec, _ := trace.SpecOf(name)
		shape := spec.Shape(c, l.extent())
		if attentionMap(p) && l.batched() {
			// Each prompt's [Heads, T_i, T_i], one after another (mapBlocks).
			_, total := l.mapBlocks(c.Heads)
			shape = []int{total}
		}
		n := elements(shape)
		if n == 0 {
			continue
		}
		if s, ok := l.slots[trace.SameAs(c, name, pos0)]; ok && !hooked(o.Hooks, name) {
			l.slots[name] = slot{shape: shape, arena: s.arena, off: s.off, alias: true}
			l.order = append(l.order, name)
			continue
		}
		// The points before the first layer (-1) and after the last are in
		// no layer, and never share an arena: they may be on different tiers.
		if spec.Stage == trace.AfterLayers {
			layer = c.Layers
		}
		// Attention scores and patterns get arenas of their own: the CPU
		// keeps a recycled arena's masked entries rather than write them
		// again, which it knows of whole arenas only.
		alone := attentionMap(p)
		if last := len(l.arenas) - 1; last < 0 || layer != arenaLayer || l.arenas[last]+n > arenaCap || alone || lastAlone {
			l.arenas = append(l.arenas, 0)
			l.arenaPoints = append(l.arenaPoints, name)
			arenaLayer = layer
		}
		lastAlone = alone
		last := len(l.arenas) - 1
		off := (l.arenas[last] + backend.SlotAlign - 1) / backend.SlotAlign * backend.SlotAlign
		l.slots[name] = slot{shape: shape, arena: last, off: off}
		l.captureElements += off + n - l.arenas[last]
		l.arenas[last] = off + n
		l.order = append(l.order, name)
	}
	return l
}

// extent is what the points' shapes depend on beyond the model.
func (l *layout) extent() trace.Extent {
	return trace.Extent{T: l.t, Pos0: l.pos0, LogitRows: l.logitRows}
}

// attentionMap reports whether p is a layer's attention scores or pattern,
// [Heads, T, keys]: materialised only when captured or hooked, each in an
// arena of its own.
func attentionMap(p trace.Point) bool { return p == trace.AttnScores || p == trace.AttnPattern }

// mapBlocks are where each prompt's attention scores (or pattern) lie in
// the run's: a batch packs each prompt's [Heads, T_i, T_i] one after
// another, each from a multiple of SlotAlign so that a GPU can bind it
// apart; total is their elements, padding included. One prompt's are the
// whole [Heads, T, keys].
func (l *layout) mapBlocks(heads int) (offs []int, total int) {
	if !l.batched() {
		return []int{0}, heads * l.t * l.keys
	}
	for _, n := range l.lens {
		total = (total + backend.SlotAlign - 1) / backend.SlotAlign * backend.SlotAlign
		offs = append(offs, total)
		total += heads * n * n
	}
	return offs, total
}

// mapShape is the shape of prompt i's attention scores (or pattern).
func (l *layout) mapShape(heads, i int) []int {
	if !l.batched() {
		return []int{heads, l.t, l.keys}
	}
	return []int{heads, l.lens[i], l.lens[i]}
}

// positions are the ids of the prefill's positions, pos0.. for each
// prompt, for a table of learned position embeddings.
func (l *layout) positions() []int32 {
	ids := make([]int32, 0, l.t)
	for _, n := range l.lens {
		for i := range n {
			ids = append(ids, int32(l.pos0+i))
		}
	}
	return ids
}

func (l *layout) anyMaterialized() bool {
	for _, m := range l.materialize {
		if m {
			return true
		}
	}
	return false
}

// attnScratch reports whether a layer's scores or pattern go to scratch:
// it materialises them (a hook on them) without capturing both, which
// would be written in their arenas.
func (l *layout) attnScratch() bool {
	for layer, m := range l.materialize {
		for _, p := range []trace.Point{trace.AttnScores, trace.AttnPattern} {
			if _, captured := l.slots[trace.LayerPoint(layer, p)]; m && !captured {
				return true
			}
		}
	}
	return false
}

func (l *layout) scratchElements(c *model.Config, o Options) int {
	n := 0
	for _, q := range (&scratch{}).needs(c, l, o, role{embed: true, layers: true, head: true}) {
		n += q.n
	}
	return n + gemmPacking(c, l, role{embed: true, layers: true, head: true})
}

// hostTables is the elements of what a prefill keeps on the host beside its
// tensors: the CPU backend's RoPE tables (a cosine and a sine for each
// rotated pair of every key, grown to up to twice the keys when decoding a
// token at a time) and the trace's tokens and their display pieces (about
// 110 bytes a token measured at T=6,144; 128 counted).
func hostTables(c *model.Config, l *layout) int {
	n := 32 * l.t
	if c.Pos == model.PosRope {
		n += 2 * l.keys * c.Rope.Dim
		if c.LocalRope != nil {
			n += 2 * l.keys * c.LocalRope.Dim
		}
	}
	return n
}

// gemmPacking is the elements of the copies the CPU backend's kernels pack
// (backend/cpu/gemm.go, gemm8.go, attention.go): x packed for the widest
// input of the tier's products, the values of every key (head dims rounded
// up to 16), each thread's block of attention rows (36 queries by every
// key), those three twice (below), each thread's fixed scratch and the
// host's tables; counted for every backend, on each tier with layers.
func gemmPacking(c *model.Config, l *layout, ro role) int {
	switch {
	case ro.layers:
		widest := max(c.DModel, c.QDim(), c.FFN)
		// 64 decoded weight rows and their transpose, 32 int8 rows (8
		// words a column), 48 x 32 result tiles, the attention's query
		// and key copies (32 + 12 rows of a head), and 128 KiB for the Go
		// runtime's caches of a thread that allocates (on 16 threads the
		// peak passed the rest by up to 1.1 MiB, docs/perf-log/2026-12-06-b.md)
		perThread := 136*widest + 48*32 + 44*c.HeadDim + 32<<10
		// The copies that grow with the prompt (x packed, the values, each
		// thread's attention rows) regrow within a prefill longer than the
		// session's last, whose copies stand as garbage until the next
		// collection: counted twice.
		growing := l.t*widest + c.KVHeads*((c.HeadDim+15)&^15)*l.keys + runtime.GOMAXPROCS(0)*36*l.keys
		return 2*growing + runtime.GOMAXPROCS(0)*perThread + hostTables(c, l)
	case ro.head:
		return l.logitRows * c.DModel
	}
	return 0
}

// elements is the number of elements of a tensor of the shape.
func elements(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}
