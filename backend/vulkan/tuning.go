package vulkan

import (
	"errors"
	"math"

	"github.com/stratalab/strata/gguf"
)

// Tuning is the switches and thresholds that choose kernels. Its defaults
// (DefaultTuning) were measured on an H200; docs/PERFORMANCE.md says how.
// A backend's streams take the tuning of its Options; the choice itself is
// a pure function of a Tuning, the device's capabilities and a product's
// shape (planMatMul, planFlash), tested without a device.
type Tuning struct {
	// Coop runs GEMMs and attention's products on cooperative matrices
	// where the device was opened with them; Subgroups runs the subgroup
	// variants of row reductions and matvec where the device has subgroup
	// arithmetic. Off, the portable kernels run, to compare the two.
	Coop, Subgroups bool
	// HalfX converts x to float16 once per MatMul (tohalf.comp) rather than
	// in each cooperative tile.
	HalfX bool
	// HalfWRows is the fewest rows of x for which weights not exact in
	// float16 are decoded to float16 once (weights16.comp) before a
	// cooperative product.
	HalfWRows HalfWRows
	// ExactInTileElems is the fewest elements of weights not exact in
	// float16 whose exact products, when their halves are not made first,
	// split them in each tile rather than run on the portable kernel.
	ExactInTileElems int
	// SplitK splits cooperative products with too few workgroups to fill
	// the device along K: those of fewer than SplitBelow workgroups
	// (SplitBelowLate on tiles that load late, SplitBelowExact at exact
	// precision). No product on the late tile is split where the products
	// of one MatMul have SplitTotal workgroups together.
	SplitK                                                  bool
	SplitBelow, SplitBelowLate, SplitBelowExact, SplitTotal int
	// Coop2 runs products of float16 weights (F16, or decoded first; at
	// exact precision in hi + lo halves where float16 does not hold them)
	// on workgroup-scope cooperative matrices (matmul_coop2.comp) where the
	// device was opened with them (Options.Coop2) and the product has at
	// least Coop2MinGroups of its workgroups (Coop2MinGroupsTensor where
	// the device loads their tiles by tensor addressing).
	Coop2                                bool
	Coop2MinGroups, Coop2MinGroupsTensor int
	// Coop2SplitK (with SplitK) lets a product of fewer workgroups of
	// tensor-load tiles than Coop2MinGroupsTensor take them all the same
	// where its split along K makes that many. Off by default: not yet
	// measured against the usual kernel's split.
	Coop2SplitK bool
	// FlashHalfKVFrom is the fewest queries for which flash_coop.comp reads
	// K and V converted to float16 once; FlashWideFrom the fewest for which
	// its workgroups take 128 rows rather than 64.
	FlashHalfKVFrom, FlashWideFrom int
	// CopyShader copies between device-local tensors with copy.comp rather
	// than the copy command.
	CopyShader bool
	// StagingBytes bounds the host data one submission stages (a write past
	// it submits what was recorded first); ReadBytes is the size of each of
	// ReadBatch's two host-readable buffers.
	StagingBytes, ReadBytes uint64

	// Set by tests only.
	coopTile   *coopTile  // replaces the cooperative GEMM's choice
	coop2Tile  *coop2Tile // replaces matmul_coop2.comp's
	rowsFactor int        // multiplies the rows of a subgroup-per-row workgroup (0: 1), so that its subgroups loop
	flashApart bool       // 128-row flash_coop.comp stages K and V in turn even where both fit
}

// HalfWRows is Tuning.HalfWRows at fast precision, at fast precision for
// weights held as 4-bit codes (Q4_K: their tiles decode 8 weights in two
// loads), at exact precision, and at exact precision for weights of fewer
// than 2^21 elements. Weights exact in float16 (Q1_0_g128, TQ2_0_g128),
// whose tiles decode them cheaply, are decoded first only at fast
// precision from FastCoop2 rows, where the products then run on
// workgroup-scope matrices by tensor loads.
type HalfWRows struct{ Fast, FastCodes, Exact, SmallExact, FastCoop2 int }

// coopHalfWSmallElems is where HalfWRows.SmallExact stops applying.
const coopHalfWSmallElems = 1 << 21

// DefaultTuning is the tuning a backend takes unless its Options give one.
func DefaultTuning() Tuning {
	return Tuning{
		Coop: true, Subgroups: true,
		HalfX: true,
		// see docs/PERFORMANCE.md, "Exact products: halves first or in the tiles"
		HalfWRows:        HalfWRows{Fast: 128, FastCodes: 512, Exact: vecRows + 1, SmallExact: 128, FastCoop2: 512},
		ExactInTileElems: coopHalfWSmallElems,
		// see docs/PERFORMANCE.md, "Split-K"
		SplitK: true, SplitBelow: 64, SplitBelowLate: 160, SplitBelowExact: 65, SplitTotal: 256,
		// see docs/perf-log/tuning-notes.md, "Workgroup-scope products"
		Coop2: true, Coop2MinGroups: 128, Coop2MinGroupsTensor: 64,
		// see docs/PERFORMANCE.md, "Flash attention on cooperative matrices"
		FlashHalfKVFrom: 1024, FlashWideFrom: 1024,
		CopyShader:   true,
		StagingBytes: 256 << 20,
		ReadBytes:    64 << 20,
	}
}

// check refuses a tuning that would stall or misroute a stream.
func (t *Tuning) check() error {
	switch {
	case t.StagingBytes == 0:
		return errors.New("vulkan: Tuning.StagingBytes is 0; staging needs room")
	case t.ReadBytes < 16 || t.ReadBytes%16 != 0:
		return errors.New("vulkan: Tuning.ReadBytes must be a positive multiple of 16")
	case t.SplitK && (t.SplitBelow < 0 || t.SplitBelowLate < 0 || t.SplitBelowExact < 0):
		return errors.New("vulkan: Tuning's split thresholds are negative")
	case t.Coop2 && (t.Coop2MinGroups < 1 || t.Coop2MinGroupsTensor < 1):
		return errors.New("vulkan: Tuning.Coop2MinGroups and Coop2MinGroupsTensor must be at least 1")
	}
	return nil
}

// devCaps is what kernel choice needs to know of a device.
type devCaps struct {
	coop         bool      // opened with cooperative matrices (float16)
	coop2        coop2Caps // and workgroup-scope ones (matmul_coop2.comp); zero: none
	subgroups    bool      // subgroup arithmetic in compute shaders
	subgroupSize uint32    // invocations of a subgroup
	sharedMem    int       // bytes of shared memory a workgroup may use
	wideGroups   bool      // workgroups of 256 invocations along x
	reduceWG     uint32    // the workgroup size of row reductions
}

func (b *Backend) caps() devCaps {
	l := &b.phys.props.Limits
	d := devCaps{
		coop:         b.coopEnabled,
		coop2:        b.coop2,
		subgroups:    b.phys.subgroupArithmetic(),
		subgroupSize: b.phys.subgroup.SubgroupSize,
		sharedMem:    int(l.MaxComputeSharedMemorySize),
		wideGroups:   l.MaxComputeWorkGroupInvocations >= 256 && l.MaxComputeWorkGroupSize[0] >= 256,
		reduceWG:     b.reduceWG,
	}
	return d.clamped(b.clamp)
}

// clamped is d as kernel choice sees it under a clamp. The subgroup size
// the planner assumes may exceed the device's: the subgroup-per-row
// kernels loop over their rows by gl_NumSubgroups, so extra subgroups idle.
func (d devCaps) clamped(c Clamp) devCaps {
	if c == ClampApple {
		d.coop, d.coop2 = false, coop2Caps{}
		d.sharedMem = min(d.sharedMem, appleSharedMem)
		d.subgroupSize = appleSubgroup
	}
	return d
}

func (t *Tuning) coop(d devCaps) bool      { return t.Coop && d.coop }
func (t *Tuning) subgroups(d devCaps) bool { return t.Subgroups && d.subgroups }

// weightShape is what kernel choice needs to know of a weight.
type weightShape struct {
	rows, cols  int
	f16         bool // float16 already: read as it is
	exactInHalf bool // every value the format holds is exact in float16
	codes       bool // held as 4-bit codes (codes4.glsl)
	bias        bool // the projection adds a bias
}

func shapeOf(m *matrix) weightShape {
	return weightShape{rows: m.w.Rows, cols: m.w.Cols, f16: m.f.typ == gguf.F16, exactInHalf: m.f.exactInHalf(), codes: m.f.codes4}
}

// gemmKernel is the kernel family a product runs on.
type gemmKernel int

const (
	gemmCoop           gemmKernel = iota // matmul_coop.comp
	gemmTiled                            // matmul.comp: shared-memory tiles on the shader cores
	gemmMatvecSubgroup                   // matvec.comp's subgroup variant, perGroup rows a workgroup
	gemmMatvec                           // matvec.comp, a workgroup per row
	gemmCoop2                            // matmul_coop2.comp
)

// projPlan is how one projection of a MatMul runs.
type projPlan struct {
	outs     int // the weight's rows
	kernel   gemmKernel
	tile     coopTile  // gemmCoop
	tile2    coop2Tile // gemmCoop2
	half     halfRange // its weights in float16 first (half.ok)
	split    splitPlan // its product split along K (split.parts > 1)
	perGroup int       // gemmMatvecSubgroup
}

// matmulPlan is how a MatMul runs: x in float16 first (halfX), the
// float16 weights' and the split products' buffers, and each projection.
type matmulPlan struct {
	halfX             bool
	halfXRows         int // rows of x's float16 buffer: past x's own for matmul_coop2.comp's whole tiles
	halfWBytes, parts uint64
	projs             []projPlan
}

// planMatMul chooses the kernels of a MatMul of rows of x (cols wide) by
// each weight, at exact precision or fast.
func planMatMul(t *Tuning, d devCaps, exact bool, rows, cols int, ws []weightShape) matmulPlan {
	p := matmulPlan{projs: make([]projPlan, len(ws)), halfXRows: rows}
	halfW, end := planHalfWeights(t, d, exact, rows, cols, ws)
	p.halfWBytes = end
	for i, w := range ws {
		pp := &p.projs[i]
		pp.outs = w.rows
		if halfW != nil {
			pp.half = halfW[i]
		}
		switch {
		case takesCoop2(t, d, exact, rows, w, pp.half):
			pp.kernel, pp.tile2 = gemmCoop2, coop2TileFor(t, d, exact, pp.half.split, rows)
			p.halfX, p.halfXRows = true, max(p.halfXRows, int(ceilDiv(rows, pp.tile2.bm))*pp.tile2.bm)
		case takesCoop(t, d, exact, rows, w, pp.half.ok):
			pp.kernel, pp.tile = gemmCoop, coopTileFor(t, d, exact, w, pp.half.ok)
			p.halfX = p.halfX || t.HalfX && cols%8 == 0
		case rows > vecRows:
			pp.kernel = gemmTiled
		case t.subgroups(d):
			pp.kernel, pp.perGroup = gemmMatvecSubgroup, subgroupRows(t, d, matvecWG)
		default:
			pp.kernel = gemmMatvec
		}
	}
	p.parts = planSplits(t, d, exact, rows, cols, p.projs)
	return p
}

// takesCoop reports whether a product of rows of x by w runs on the
// cooperative GEMM: at fast precision, for any weights; at exact precision,
// for weights exact in float16 (x is split in two halves) and for the
// others split in hi + lo halves, first (halvesFirst) or, for weights of
// at least ExactInTileElems elements, in the tiles where shared memory
// holds the halves.
func takesCoop(t *Tuning, d devCaps, exact bool, rows int, w weightShape, halvesFirst bool) bool {
	return rows > vecRows && t.coop(d) &&
		(!exact || w.exactInHalf || halvesFirst || w.rows*w.cols >= t.ExactInTileElems && splitWFits(d))
}

// coop2Lanes is matmul_coop2.comp's workgroup size.
const coop2Lanes = 256

// coop2Tile is matmul_coop2.comp's tile: bn rows of W by bm of x, bk along
// K a step; with tensor, loaded by tensor loads (the matmul_coop2t_
// variants) rather than through shared memory.
type coop2Tile struct {
	bn, bm, bk int
	tensor     bool
}

// kernel is the tile's variant of matmul_coop2.comp for a weight format.
func (c coop2Tile) kernel(suffix string) string {
	if c.tensor {
		return "matmul_coop2t_" + suffix
	}
	return "matmul_coop2_" + suffix
}

// spec is matmul_coop2.comp's constants at exact precision or fast, with
// W in hi + lo halves (wlo) or not.
func (c coop2Tile) spec(exact, wlo bool) []uint32 {
	return []uint32{coop2Lanes, uint32(c.bn), uint32(c.bm), uint32(c.bk), b2u(exact), b2u(wlo)}
}

// shared is the shared memory the tile takes: a step's rows of W and x in
// float16, each row padded by 16 bytes, with the lo halves of x (exact)
// and of W (wlo); and the range flag. Tensor loads take none of it.
func (c coop2Tile) shared(exact, wlo bool) int {
	if c.tensor {
		return 4
	}
	rows := c.bn*(1+int(b2u(wlo))) + c.bm*(1+int(b2u(exact)))
	return rows*(c.bk/8+1)*16 + 4
}

// fitsCoop2 reports whether the device takes the tile, by its matrices'
// granularity and largest dimension (W's rows are the products' M, x's
// their N) and by its shared memory.
func (d devCaps) fitsCoop2(c coop2Tile, exact, wlo bool) bool {
	g := d.coop2.gran
	return d.coop2.maxDim > 0 && c.bn%g[0] == 0 && c.bm%g[1] == 0 && c.bk%g[2] == 0 &&
		max(c.bn, c.bm, c.bk) <= d.coop2.maxDim && c.shared(exact, wlo) <= d.sharedMem
}

// coop2TileFor picks the workgroup-scope tile for rows of x: 128 x 128, and
// 128 x 256 at fast precision from 2048 rows (on an H100, 128 x 256 x 32 ran
// at 114 TFLOP/s against 128 x 128 x 64's 93 at T=2048, 58 against 98 at
// T=512; by tensor loads, 128 x 256 x 64 at 244 against 200 at T=2048; at
// exact precision 128 x 256 tiles with W's lo halves made no pipeline); 64
// along K where shared memory holds that, else 32. Tiles of 64 rows of W,
// for twice the workgroups of a short prompt, lost to 128-row tiles with
// fewer workgroups (Tuning.Coop2MinGroupsTensor).
func coop2TileFor(t *Tuning, d devCaps, exact, wlo bool, rows int) coop2Tile {
	if t.coop2Tile != nil {
		return *t.coop2Tile
	}
	c := coop2Tile{bn: 128, bm: 128, bk: 64, tensor: d.coop2.tensor}
	if !exact && rows >= 2048 {
		c.bm = 256
	}
	if c.shared(exact, wlo) > d.sharedMem {
		c.bk = 32
	}
	return c
}

// takesCoop2 reports whether a product runs on matmul_coop2.comp: with
// float16 weights (F16, or decoded first; in hi + lo halves at exact
// precision where float16 does not hold them), no bias, whole tiles along
// W's rows and K, and enough workgroups.
func takesCoop2(t *Tuning, d devCaps, exact bool, rows int, w weightShape, half halfRange) bool {
	if !t.Coop2 || d.coop2.maxDim == 0 || !t.coop(d) || !half.ok || w.bias {
		return false
	}
	c := coop2TileFor(t, d, exact, half.split, rows)
	if !d.fitsCoop2(c, exact, half.split) || rows < c.bm || w.rows%c.bn != 0 || w.cols%c.bk != 0 {
		return false
	}
	groups, fewest := coop2Groups(c, rows, w.rows), coop2Fewest(t, c)
	return groups >= fewest || groups*coop2Split(t, c, groups, w.cols).parts >= fewest
}

// coop2Groups is the workgroups of a product of rows of x by outs rows of W
// on tile c.
func coop2Groups(c coop2Tile, rows, outs int) int { return outs / c.bn * int(ceilDiv(rows, c.bm)) }

// coop2Fewest is the fewest workgroups a product takes tile c with, split
// or not.
func coop2Fewest(t *Tuning, c coop2Tile) int {
	if c.tensor {
		return t.Coop2MinGroupsTensor
	}
	return t.Coop2MinGroups
}

// coop2Split is the split along K of a product of groups workgroups of
// tile c (parts 0: none), for tensor-load tiles with Coop2SplitK.
func coop2Split(t *Tuning, c coop2Tile, groups, cols int) splitPlan {
	if !t.SplitK || !t.Coop2SplitK || !c.tensor {
		return splitPlan{}
	}
	return kSplit(groups, cols, c.bk)
}

// coopTileFor picks the tile of a cooperative product: 128 x 128 tiles ran
// fastest or level with the best (see docs/PERFORMANCE.md, "Cooperative
// GEMM tiles"); smallCoopTile where shared memory holds no other.
func coopTileFor(t *Tuning, d devCaps, exact bool, w weightShape, halvesFirst bool) coopTile {
	if t.coopTile != nil {
		return *t.coopTile
	}
	splitW := exact && !w.exactInHalf
	if c := usualCoopTile(exact, splitW, halvesFirst); c.shared(exact, splitW) <= d.sharedMem {
		return c
	}
	return smallCoopTile()
}

// usualCoopTile is coopTileFor's tile where shared memory allows, for
// weights split in hi + lo halves (splitW) or not, decoded first
// (halvesFirst) or in the tiles.
func usualCoopTile(exact, splitW, halvesFirst bool) coopTile {
	switch {
	case splitW && halvesFirst:
		return coopTile{tm: 2, tn: 4, wgm: 4, bk: 32}
	case exact: // weights split in the tiles too: 4 x 2 ran 1.01-1.15x faster than 2 x 4
		return coopTile{tm: 4, tn: 2, wgm: 2, bk: 32}
	case halvesFirst:
		return coopTile{tm: 2, tn: 4, wgm: 4, bk: 64}
	}
	// Loading late holds 128 registers, so two workgroups fit an SM.
	return coopTile{tm: 4, tn: 2, wgm: 2, bk: 32, late: true}
}

// smallCoopTile is the tile for devices with too little shared memory for
// the others: 20 KiB at exact precision, 30 with weights in hi + lo.
func smallCoopTile() coopTile { return coopTile{tm: 2, tn: 2, wgm: 2, bk: 32} }

// splitWFits reports whether the small tile fits in shared memory with
// weights in hi + lo halves.
func splitWFits(d devCaps) bool { return smallCoopTile().shared(true, true) <= d.sharedMem }

// fewestHalfWRows is HalfWRows for a weight w (for weights exact in
// float16, planHalfWeights also asks that the product take the
// tensor-load tiles).
func fewestHalfWRows(t *Tuning, d devCaps, exact bool, w weightShape) int {
	elems := w.rows * w.cols
	switch {
	case w.exactInHalf && (exact || !d.coop2.tensor):
		return math.MaxInt
	case w.exactInHalf:
		return t.HalfWRows.FastCoop2
	case !exact && w.codes:
		return t.HalfWRows.FastCodes
	case !exact:
		return t.HalfWRows.Fast
	case elems < coopHalfWSmallElems:
		return t.HalfWRows.SmallExact
	}
	return t.HalfWRows.Exact
}

// planHalfWeights lays out the buffer (end bytes) of the weights of a
// MatMul that are decoded to float16 first; nil where no projection's
// tiles read float16 weights. F16 weights are read as they are, for any
// number of rows: decoded in the tiles, two bytes at a time, they ran
// 1.7-5x slower than Q1_0_g128.
func planHalfWeights(t *Tuning, d devCaps, exact bool, rows, cols int, ws []weightShape) (ranges []halfRange, end uint64) {
	if rows <= vecRows || !t.coop(d) || !t.HalfX || cols%8 != 0 {
		return nil, 0
	}
	fits := !exact || splitWFits(d)
	ranges = make([]halfRange, len(ws))
	used := false
	for i, w := range ws {
		if w.cols != cols {
			continue
		}
		if w.f16 {
			ranges[i], used = halfRange{ok: true, direct: true, bigBase: noRangeFlags}, true
			continue
		}
		if !fits || rows < fewestHalfWRows(t, d, exact, w) ||
			w.exactInHalf && !takesCoop2(t, d, exact, rows, w, halfRange{ok: true}) {
			continue
		}
		used = true
		halves := 2 * uint64(w.rows) * uint64(cols)
		r := halfRange{ok: true, split: exact, base: uint32(end / 16), loBase: uint32(end / 16), lo: end}
		end += halves
		if exact {
			r.loBase, end = uint32(end/16), end+halves
		}
		r.bigBase = uint32(end / 4)
		end += align16(4 * uint64(w.rows)) // keeps the next range 16-byte aligned
		r.hi = end
		ranges[i] = r
	}
	if !used || end > coopHalfWBytes {
		return nil, 0
	}
	return ranges, end
}

// planSplits sets the split along K of each cooperative product of a
// MatMul (see docs/PERFORMANCE.md, "Split-K") and returns the bytes of
// their parts. The products of one call run together: each product's
// workgroups, and all of them, decide.
func planSplits(t *Tuning, d devCaps, exact bool, rows, cols int, projs []projPlan) uint64 {
	if !t.SplitK || cols < 2*coopSplitChunk {
		return 0
	}
	groups, total := make([]int, len(projs)), 0
	for i, p := range projs {
		if p.kernel == gemmCoop {
			groups[i] = int(ceilDiv(p.outs, p.tile.bn()) * ceilDiv(rows, p.tile.bm()))
			total += groups[i]
		}
	}
	var end uint64
	place := func(sp splitPlan) splitPlan { // its bytes of the parts buffer, after the last product's
		sp.lo, sp.hi = end, end+4*uint64(sp.parts)*uint64(sp.stride)
		end = align16(sp.hi)
		return sp
	}
	for i := range projs {
		p := &projs[i]
		if c := p.tile2; p.kernel == gemmCoop2 {
			// takesCoop2 let it in on a split that reaches coop2Fewest
			if n := coop2Groups(c, rows, p.outs); n < coop2Fewest(t, c) {
				padded := int(ceilDiv(rows, c.bm)) * c.bm // its last tile is stored whole
				sp := coop2Split(t, c, n, cols)
				sp.stride = padded * p.outs
				p.split = place(sp)
			}
			continue
		}
		n := groups[i]
		below := t.SplitBelow
		if exact {
			below = t.SplitBelowExact
		}
		if p.tile.late {
			below = t.SplitBelowLate
			if total >= t.SplitTotal {
				continue
			}
		}
		if n == 0 || n >= below {
			continue
		}
		sp := kSplit(n, cols, p.tile.bk)
		if sp.parts < 2 {
			continue
		}
		sp.stride = rows * p.outs
		p.split = place(sp)
	}
	return end
}

// align16 rounds a range's end up to 16 bytes, where cooperative-matrix
// stores into the next range may start.
func align16(n uint64) uint64 { return (n + 15) &^ 15 }

// kSplit is how a product of n workgroups is cut along K (cols): into
// enough parts for about coopSplitGroups workgroups, at most coopSplitMax
// of at least coopSplitChunk columns each, whole steps of bk; parts below
// 2: not at all.
func kSplit(n, cols, bk int) splitPlan {
	parts := min(coopSplitMax, (coopSplitGroups+n-1)/n, cols/coopSplitChunk)
	if parts < 2 {
		return splitPlan{}
	}
	chunk := (cols + parts - 1) / parts
	chunk = (chunk + bk - 1) / bk * bk // the kernels step through whole tiles of k
	return splitPlan{parts: (cols + chunk - 1) / chunk, chunk: chunk}
}

// subgroupRows is the rows a workgroup of wg invocations takes, a subgroup
// per row: as many as the device's subgroup size gives.
func subgroupRows(t *Tuning, d devCaps, wg uint32) int {
	return max(1, int(wg/d.subgroupSize)) * max(1, t.rowsFactor)
}

// normKernel picks RMSNorm's kernel for rows of dim elements and the rows a
// workgroup of it takes: a subgroup per row for a head's Q/K norm (see
// docs/PERFORMANCE.md, "Norms on subgroups"), the shader looping where the
// device has fewer subgroups.
func normKernel(t *Tuning, d devCaps, dim int) (string, int) {
	if t.subgroups(d) && dim <= subgroupNormDim {
		return "rmsnorm_sg", subgroupRows(t, d, d.reduceWG)
	}
	return "rmsnorm", 1
}

// flashPlan is how flash attention runs: on cooperative matrices
// (flash_coop.comp) or not, its workgroups' rows (16 for each subgroup),
// whether they stage a block's K and V in turn to fit 128 rows in the
// device's shared memory, and whether they read K and V converted to
// float16 once.
type flashPlan struct {
	coop          bool
	rows          int
	apart, halfKV bool
}

// planFlash chooses flash attention's kernel for queries of headDim dims.
// On cooperative matrices, long prompts convert K and V to float16 once
// and take 128-row workgroups (see docs/PERFORMANCE.md, "Flash attention
// on cooperative matrices"); 64 rows fit wherever coopFlash chose it.
func planFlash(t *Tuning, d devCaps, exact bool, queries, headDim int) flashPlan {
	if !coopFlash(t, d, exact, headDim) {
		return flashPlan{rows: flashRows}
	}
	p := flashPlan{coop: true, rows: 64, halfKV: queries >= t.FlashHalfKVFrom}
	if queries >= t.FlashWideFrom && d.wideGroups {
		if !t.flashApart && flashCoopShared(exact, 128, false) <= d.sharedMem {
			p.rows = 128
		} else if flashCoopShared(exact, 128, true) <= d.sharedMem {
			p.rows, p.apart = 128, true
		}
	}
	return p
}

// coopFlash reports whether flash attention runs on cooperative matrices:
// on heads of whole 16-dim tiles up to 128, where its shared memory fits.
func coopFlash(t *Tuning, d devCaps, exact bool, headDim int) bool {
	return t.coop(d) && headDim%16 == 0 && headDim <= 128 && d.subgroups &&
		flashCoopShared(exact, 64, false) <= d.sharedMem
}

// expertTileRows is how many rows of x a workgroup of a MatMulExperts' kernel
// takes.
func expertTileRows(p projPlan) int {
	switch p.kernel {
	case gemmCoop:
		return p.tile.bm()
	case gemmTiled:
		return tile
	}
	return vecRows
}

// planExperts chooses the kernel (GROUPED) of a MatMulExperts whose runs hold
// avgRows rows of x on average, by weights of shape w: cooperative wherever
// the weights fit its tiles, split in hi + lo halves in them at exact
// precision (Qwen3-30B-A3B's 768 x 2048 experts ran 1.11-1.96x faster so
// than on the portable kernel: docs/perf-log/tuning-notes.md); its tile as
// tall as the runs (a mixture's experts get a few rows each below a few
// thousand tokens), so that a run's weights are decoded once for all its
// rows. Without them, runs of a few rows take matvec.comp, where
// matmul.comp's 64-row tiles would mostly compute rows of nothing.
func planExperts(t *Tuning, d devCaps, exact bool, avgRows int, w weightShape) projPlan {
	if !t.coop(d) || exact && !w.exactInHalf && !splitWFits(d) {
		switch {
		case avgRows > vecRows:
			return projPlan{kernel: gemmTiled}
		case t.subgroups(d):
			return projPlan{kernel: gemmMatvecSubgroup, perGroup: subgroupRows(t, d, matvecWG)}
		}
		return projPlan{kernel: gemmMatvec}
	}
	if t.coopTile != nil {
		return projPlan{kernel: gemmCoop, tile: *t.coopTile}
	}
	splitW := exact && !w.exactInHalf
	c := usualCoopTile(exact, splitW, false)
	switch {
	case avgRows <= 16:
		c = coopTile{tm: 1, tn: 1, wgm: 1, bk: 32}
	case avgRows <= 32:
		c = coopTile{tm: 2, tn: 1, wgm: 1, bk: 32}
	case avgRows <= 64:
		c = smallCoopTile()
	}
	if c.shared(exact, splitW) > d.sharedMem {
		c = smallCoopTile()
	}
	return projPlan{kernel: gemmCoop, tile: c}
}
