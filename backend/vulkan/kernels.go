package vulkan

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/model"
)

// Every kernel checks its extents on the host: shaders index without bounds
// checks, so a short tensor must be an error before it is a stray access.

const (
	tile      = 64  // output tile edge of matmul, scores and mix (tile.glsl)
	vecRows   = 8   // the most rows of x matvec.comp takes
	matvecWG  = 128 // matvec.comp's workgroup size
	flashRows = 64  // (query, head) rows per flash-attention workgroup (flash.comp's R)
	flashKeys = 64  // keys per flash-attention block (BKV)
	flashDims = 16  // head dims per staged Q/K slice (DC)
	maxHeadD  = 256 // flash.comp's register tiles hold at most this
	maxGroups = 65535
)

// coopTile is a tile shape of matmul_coop.comp (its specialization
// constants): tm x tn 16x16 accumulators per subgroup, wgm of the 8
// subgroups along the rows of x, k step bk. late: each step loads its
// tiles after the barrier instead of into registers during the step
// before, which holds fewer registers (PREFETCH 0).
type coopTile struct {
	tm, tn, wgm, bk int
	late            bool
}

func (c coopTile) bm() int { return 16 * c.tm * c.wgm }
func (c coopTile) bn() int { return 16 * c.tn * (8 / c.wgm) }

// spec is matmul_coop.comp's specialization constants for the tile at the
// given precision, x in float16 first (a16), weights in float16 first
// (b16), split in hi + lo halves (wlo).
func (c coopTile) spec(exact bool, a16, b16, wlo uint32) []uint32 {
	return []uint32{uint32(c.tm), uint32(c.tn), uint32(c.wgm), uint32(c.bk), b2u(exact), a16, b16, wlo, b2u(!c.late)}
}

// shared is the tile's shared memory in bytes (matmul_coop.comp's Ahi, Alo,
// Bhi and Blo: rows of bk + 8 halves), Alo at exact precision, Blo with
// split weights.
func (c coopTile) shared(exact, splitW bool) int {
	a, b := 1, 1
	if exact {
		a = 2
	}
	if splitW {
		b = 2
	}
	return (a*c.bm() + b*c.bn()) * (c.bk + 8) * 2
}

func (c coopTile) String() string {
	late := ""
	if c.late {
		late = "/late"
	}
	return fmt.Sprintf("%dx%d/%dx%d/k%d%s", c.bm(), c.bn(), c.tm, c.tn, c.bk, late)
}

// coopTiles are the shapes the cooperative GEMM is tested and timed with;
// coopTileFor picks among them.
var coopTiles = []coopTile{
	{tm: 1, tn: 2, wgm: 2, bk: 32}, // 32 x 128
	{tm: 1, tn: 4, wgm: 4, bk: 32}, // 64 x 128, 1 x 4 per subgroup
	{tm: 2, tn: 2, wgm: 2, bk: 32}, // 64 x 128, 2 x 2 per subgroup
	{tm: 1, tn: 4, wgm: 4, bk: 64},
	{tm: 2, tn: 4, wgm: 4, bk: 32},             // 128 x 128
	{tm: 2, tn: 4, wgm: 4, bk: 64},             // (fast precision only: shared memory)
	{tm: 2, tn: 4, wgm: 2, bk: 32},             // 64 x 256
	{tm: 4, tn: 2, wgm: 2, bk: 32},             // 128 x 128, 4 x 2 per subgroup
	{tm: 4, tn: 4, wgm: 2, bk: 32},             // 128 x 256
	{tm: 4, tn: 4, wgm: 4, bk: 32},             // 256 x 128 (fast precision only: shared memory)
	{tm: 4, tn: 2, wgm: 2, bk: 32, late: true}, // 128 x 128, 4 x 2, loading late
	{tm: 2, tn: 4, wgm: 4, bk: 32, late: true}, // 128 x 128, 2 x 4, loading late
}

// forcedCoopTile, when set (by tests), replaces coopTileFor's choice.
var forcedCoopTile *coopTile

// coopTileFor picks the tile for a GEMM at the given precision, m's
// weights in float16 first (hw.ok) or decoded in the tiles, split in hi +
// lo halves or not (splitsW). On the H200
// (BenchmarkCoopTiles with a warm-up, 12288 x 4096 weights, T = 128, 512,
// 2048), 128 x 128 tiles ran fastest or level with the best: at fast
// precision with k steps of 64 (1-bit weights 70 / 96 / 125 TFLOP/s
// against 60 / 99 / 103 for the 64 x 128 tile; Q4_K and Q6_K decoded first
// 98-134 at T >= 512); at exact precision, 4 x 2 accumulators per subgroup
// for 1-bit weights (48 / 82 / 88 against 49 / 78 / 84) and 2 x 4 for
// weights in hi + lo halves (36 / 63 / 73, where the portable kernel gave
// 13 / 18 / 19). On 1024-wide weights (K and V) no tile did well: too few
// workgroups to fill the device. Weights decoded in the tiles at fast
// precision take the 4 x 2 tile loading late: it holds 128 registers (the
// driver's statistics, TestKernelStatistics) where the prefetching tiles
// hold 155-204, so two workgroups fit an SM, and 1-bit weights ran at 129
// / 154 TFLOP/s at T = 512 / 2048 against 104 / 122 (bonsai-1.7b fast
// prefills 1.10 / 1.19x faster). Loading late did not pay where it
// stays over 128 registers or reads float16 weights: exact 1-bit 79 / 85
// against 81 / 89 (130 registers), Q4_K in hi + lo halves 50 / 59 against
// 57 / 66, Q4_K decoded first at fast precision 92 / 136 against 109 / 135.
func (s *stream) coopTileFor(exact bool, m *matrix, hw halfRange) coopTile {
	if forcedCoopTile != nil {
		return *forcedCoopTile
	}
	splitW := splitsW(exact, m)
	if t := usualCoopTile(exact, splitW, hw.ok); t.shared(exact, splitW) <= int(s.b.phys.props.Limits.MaxComputeSharedMemorySize) {
		return t
	}
	return smallCoopTile
}

// splitsW reports whether a cooperative product splits m's weights in hi +
// lo halves: at exact precision, weights not exact in float16, whether
// weights16.comp splits them first or each tile does.
func splitsW(exact bool, m *matrix) bool { return exact && !m.f.exactInHalf() }

// usualCoopTile is coopTileFor's tile where shared memory allows, for
// weights split in hi + lo halves (splitW) or not, decoded first (halvesFirst)
// or in the tiles.
func usualCoopTile(exact, splitW, halvesFirst bool) coopTile {
	switch {
	case splitW && halvesFirst:
		return coopTile{tm: 2, tn: 4, wgm: 4, bk: 32}
	case exact: // weights split in the tiles too: 4 x 2 ran 1.01-1.15x faster than 2 x 4 (BenchmarkCoopTiles, Q8_0 and Q4_K)
		return coopTile{tm: 4, tn: 2, wgm: 2, bk: 32}
	case halvesFirst:
		return coopTile{tm: 2, tn: 4, wgm: 4, bk: 64}
	}
	return coopTile{tm: 4, tn: 2, wgm: 2, bk: 32, late: true}
}

// smallCoopTile is the tile for devices with too little shared memory for
// the others: 20 KiB at exact precision, 30 with weights in hi + lo.
var smallCoopTile = coopTile{tm: 2, tn: 2, wgm: 2, bk: 32}

// splitWFits reports whether the small tile fits in shared memory with
// weights in hi + lo halves.
func (s *stream) splitWFits() bool {
	return smallCoopTile.shared(true, true) <= int(s.b.phys.props.Limits.MaxComputeSharedMemorySize)
}

func ceilDiv(a, b int) uint32 { return uint32((a + b - 1) / b) }

// grid1 spreads n elements over workgroups of wg for a grid-stride loop.
func grid1(n, wg int) (uint32, uint32, uint32) {
	return min(ceilDiv(n, wg), maxGroups), 1, 1
}

// gridRows gives one workgroup per row on a 2-D grid (common.glsl's groupIndex).
func gridRows(rows int) (uint32, uint32, uint32) {
	x := min(rows, maxGroups)
	if x == 0 {
		return 0, 1, 1
	}
	return uint32(x), ceilDiv(rows, x), 1
}

func f32(v float32) uint32 { return math.Float32bits(v) }

func (s *stream) matrixOf(m backend.Matrix) *matrix {
	x, ok := m.(*matrix)
	if !ok {
		s.fail(fmt.Errorf("vulkan: a %T is not a weight uploaded to the Vulkan backend", m))
		return nil
	}
	return x
}

// fits fails the stream unless every tensor is non-nil and holds its need.
func (s *stream) fits(kernel string, ts []*tensor, needs ...int) bool {
	for i, t := range ts {
		if t == nil {
			return false
		}
		if needs[i] < 0 {
			s.fail(fmt.Errorf("vulkan: %s of a negative size on %s", kernel, t.name))
			return false
		}
		if needs[i] > t.n {
			s.fail(fmt.Errorf("vulkan: %s needs %d elements of %s, which has %d", kernel, needs[i], t.name, t.n))
			return false
		}
	}
	return true
}

// helper returns a stream-owned buffer of at least n bytes, replacing cur
// when it is too small.
func (s *stream) helper(cur *buffer, n uint64) *buffer {
	if cur != nil && cur.size >= n {
		return cur
	}
	buf, err := s.b.newBuffer(max(n, 4096), deviceLocal)
	if err != nil {
		s.fail(err)
		return nil
	}
	for i, h := range s.r.helpers {
		if h == cur {
			s.r.helpers = append(s.r.helpers[:i], s.r.helpers[i+1:]...)
			s.r.deferred = append(s.r.deferred, cur)
			break
		}
	}
	s.r.helpers = append(s.r.helpers, buf)
	return buf
}

func (s *stream) Embed(dst backend.Tensor, table backend.Matrix, ids []int32) {
	d, m := s.tensorOf(dst), s.matrixOf(table)
	if m == nil || !s.fits("embed", []*tensor{d}, len(ids)*m.w.Cols) {
		return
	}
	for _, id := range ids {
		if id < 0 || int(id) >= m.w.Rows {
			s.fail(fmt.Errorf("vulkan: token id %d outside %s's %d rows", id, m.w.Name, m.w.Rows))
			return
		}
	}
	if len(ids) == 0 || !s.begin() {
		return
	}
	if s.ids = s.helper(s.ids, 4*uint64(len(ids))); s.ids == nil {
		return
	}
	s.writeBytes(s.ids, 0, unsafe.Slice((*byte)(unsafe.Pointer(&ids[0])), 4*len(ids)))
	x, y, z := grid1(len(ids)*m.w.Cols, 256)
	s.dispatch("embed_"+m.f.suffix, nil, []use{d.writes(), {buf: m.buf, bind: m.off, bindSize: m.size}, {buf: s.ids}},
		[]uint32{uint32(len(ids)), uint32(m.w.Cols), m.scaleBase}, x, y, z)
}

// subgroupNormDim is the widest row RMSNorm gives a subgroup rather than a
// workgroup: a head's Q/K norm (64-256 elements). On the H200, rows of 128
// on subgroups took bonsai-8b's norms at T=2048 from 7.9 to 2.6 ms, while
// its 4096-wide rows on subgroups were slower at T=128 (16 workgroups of
// 8 rows: the stage 2.0 ms against 1.4) and at T=2048 (4.0 against 2.6).
const subgroupNormDim = 256

// rowsFactor multiplies the rows a workgroup of a kernel with a subgroup
// per row takes (rmsnorm_sg, matvec_sg), so that tests see its subgroups
// loop over more rows than they are.
var rowsFactor = 1

// normKernel picks RMSNorm's kernel for rows of dim elements and the rows a
// workgroup of it takes: a subgroup per row, as many as the device's
// subgroup size gives (the shader loops where it has fewer subgroups).
func (b *Backend) normKernel(dim int) (string, int) {
	if b.subgroups && dim <= subgroupNormDim {
		return "rmsnorm_sg", b.subgroupRows(b.reduceWG)
	}
	return "rmsnorm", 1
}

// subgroupRows is the rows a workgroup of wg invocations takes, a subgroup
// per row: as many as the device's subgroup size gives.
func (b *Backend) subgroupRows(wg uint32) int {
	return max(1, int(wg/b.phys.subgroup.SubgroupSize)) * rowsFactor
}

func (s *stream) RMSNorm(dst, src, gain, scale backend.Tensor, rows, dim int, eps float32) {
	d, x, g := s.tensorOf(dst), s.tensorOf(src), s.tensorOf(gain)
	if !s.fits("rmsnorm", []*tensor{d, x, g}, rows*dim, rows*dim, dim) {
		return
	}
	sc, write := s.scaleOut(scale, d, rows)
	if sc == nil {
		return
	}
	kernel, perGroup := s.b.normKernel(dim)
	gx, gy, gz := gridRows(int(ceilDiv(rows, perGroup)))
	s.dispatch(kernel, []uint32{s.b.reduceWG, uint32(perGroup)}, []use{d.writes(), x.reads(), g.reads(), sc.writes()},
		[]uint32{uint32(rows), uint32(dim), f32(eps), write}, gx, gy, gz)
}

// scaleOut is a norm's scale output: scale's tensor, or dst standing in
// (bound, never written) when scale is nil.
func (s *stream) scaleOut(scale backend.Tensor, dst *tensor, rows int) (*tensor, uint32) {
	if scale == nil {
		return dst, 0
	}
	sc := s.tensorOf(scale)
	if !s.fits("norm scale", []*tensor{sc}, rows) {
		return nil, 0
	}
	return sc, 1
}

func (s *stream) LayerNorm(dst, src, gain, bias, scale backend.Tensor, rows, dim int, eps float32) {
	d, x, g, b := s.tensorOf(dst), s.tensorOf(src), s.tensorOf(gain), s.tensorOf(bias)
	if !s.fits("layernorm", []*tensor{d, x, g, b}, rows*dim, rows*dim, dim, dim) {
		return
	}
	sc, write := s.scaleOut(scale, d, rows)
	if sc == nil {
		return
	}
	gx, gy, gz := gridRows(rows)
	s.dispatch("layernorm", []uint32{s.b.reduceWG}, []use{d.writes(), x.reads(), g.reads(), b.reads(), sc.writes()},
		[]uint32{uint32(rows), uint32(dim), f32(eps), write}, gx, gy, gz)
}

func (s *stream) NormApply(dst, src, scale, gain, bias backend.Tensor, rows, dim int, center bool) {
	d, x, sc, g := s.tensorOf(dst), s.tensorOf(src), s.tensorOf(scale), s.tensorOf(gain)
	if !s.fits("normapply", []*tensor{d, x, sc, g}, rows*dim, rows*dim, rows, dim) {
		return
	}
	uses, name := []use{d.writes(), x.reads(), sc.reads(), g.reads()}, "normapply_rms"
	if center {
		b := s.tensorOf(bias)
		if !s.fits("normapply", []*tensor{b}, dim) {
			return
		}
		uses, name = append(uses, b.reads()), "normapply_layer"
	}
	gx, gy, gz := gridRows(rows)
	s.dispatch(name, []uint32{s.b.reduceWG}, uses, []uint32{uint32(rows), uint32(dim)}, gx, gy, gz)
}

func (s *stream) SetPrecision(p backend.Precision) { s.precision = p }

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

func (s *stream) MatMul(x backend.Tensor, rows int, outs ...backend.Proj) {
	xs := s.tensorOf(x)
	if xs == nil || len(outs) == 0 {
		return
	}
	cols := outs[0].W.Cols()
	fast := s.precision == backend.PrecisionFast
	var half *buffer // x in float16, made for the first cooperative product
	var loBase, bigBase uint32
	halfW := s.halfWeights(rows, cols, outs) // each projection's weights in float16, or nil
	splits := s.splitPlans(rows, cols, outs, halfW)
	var sums []func() // of the products split along K, after all of them
	// The projections read the same x and write different outputs, so they
	// are recorded back to back with no barrier between them.
	for i, p := range outs {
		m, dst := s.matrixOf(p.W), s.tensorOf(p.Dst)
		if m == nil {
			return
		}
		if m.w.Cols != cols {
			s.fail(fmt.Errorf("vulkan: fused matmul mixes %d and %d input columns", cols, m.w.Cols))
			return
		}
		name := "matmul " + m.w.Name
		if !s.fits(name, []*tensor{xs, dst}, rows*cols, rows*m.w.Rows) {
			return
		}
		bias, hasBias := xs, uint32(0) // an unused binding still needs a buffer
		if p.Bias != nil {
			if bias = s.tensorOf(p.Bias); !s.fits(name, []*tensor{bias}, m.w.Rows) {
				return
			}
			hasBias = 1
		}
		uses := []use{xs.reads(), {buf: m.buf, bind: m.off, bindSize: m.size}, dst.writes(), bias.reads()}
		push := []uint32{uint32(rows), uint32(m.w.Rows), uint32(cols), m.scaleBase, hasBias}
		var hw halfRange
		if halfW != nil {
			hw = halfW[i]
		}
		if s.takesCoop(rows, m, hw) {
			if half == nil && cols%8 == 0 && coopHalfX {
				if half, loBase, bigBase = s.toHalf(xs, rows, cols, !fast); half == nil {
					return
				}
			}
			a16, xh := uint32(0), xs.reads() // an unused binding still needs a buffer
			if half != nil {
				a16, xh = 1, use{buf: half}
			}
			t := s.coopTileFor(!fast, m, hw)
			wh := xs.reads()
			gx, gy := ceilDiv(m.w.Rows, t.bn()), ceilDiv(rows, t.bm())
			if hw.ok {
				wh = use{buf: s.halfW, lo: hw.lo, hi: hw.hi}
				if hw.direct {
					wh = uses[1]
				}
				gx, gy = gy, gx // matmul_coop.comp's B16 runs along x's rows first
			}
			gz, kChunk, yBase := uint32(1), uint32(0), uint32(0)
			if splits != nil && splits[i].parts > 1 {
				sp := splits[i]
				uses[2] = use{buf: s.parts, write: true, lo: sp.lo, hi: sp.hi}
				push[4] = 0 // splitk.comp adds the bias
				gz, kChunk, yBase = uint32(sp.parts), uint32(sp.chunk), uint32(sp.lo/4)
				outCols := m.w.Rows
				sums = append(sums, func() {
					s.sumParts(use{buf: s.parts, lo: sp.lo, hi: sp.hi}, dst, bias, hasBias, rows, outCols, sp.parts)
				})
			}
			s.dispatch("matmul_coop_"+m.f.suffix, t.spec(!fast, a16, b2u(hw.ok), b2u(splitsW(!fast, m))), append(uses, xh, wh),
				append(push, loBase, bigBase, hw.base, hw.loBase, hw.bigBase, kChunk, yBase), gx, gy, gz)
			continue
		}
		if rows > vecRows {
			s.dispatch("matmul_"+m.f.suffix, []uint32{b2u(fast)}, uses, push, ceilDiv(m.w.Rows, tile), ceilDiv(rows, tile), 1)
			continue
		}
		if s.b.subgroups {
			perGroup := s.b.subgroupRows(matvecWG)
			gx, gy, gz := gridRows(int(ceilDiv(m.w.Rows, perGroup)))
			s.dispatch("matvec_"+m.f.suffix+"_sg", []uint32{uint32(perGroup)}, uses, push, gx, gy, gz)
			continue
		}
		gx, gy, gz := gridRows(m.w.Rows)
		s.dispatch("matvec_"+m.f.suffix, nil, uses, push, gx, gy, gz)
	}
	for _, sum := range sums {
		sum()
	}
}

// sumParts records splitk.comp: dst (rows x cols) is the sum of parts
// products from part's range on, plus the bias with hasBias.
func (s *stream) sumParts(part use, dst, bias *tensor, hasBias uint32, rows, cols, parts int) {
	n := rows * cols
	gx, gy, gz := grid1(n, 256)
	s.dispatch("splitk", nil, []use{part, dst.writes(), bias.reads()},
		[]uint32{uint32(n), uint32(cols), uint32(parts), uint32(part.lo / 4), hasBias}, gx, gy, gz)
}

// takesCoop reports whether a product of rows of x by m runs on the
// cooperative GEMM: at fast precision, for any weights; at exact precision,
// for weights exact in float16 (x is split in two halves) and for the
// others split in hi + lo halves, first (hw) or, for weights of at least
// coopExactInTileElems elements, in the tiles where shared memory holds
// the halves.
func (s *stream) takesCoop(rows int, m *matrix, hw halfRange) bool {
	return rows > vecRows && s.b.coop &&
		coopRoute(s.precision == backend.PrecisionExact, m.f.exactInHalf(), hw.ok, s.splitWFits(), m.w.Rows*m.w.Cols)
}

// coopRoute is takesCoop's rule for a device with cooperative matrices and
// more than vecRows rows: whether weights of elems elements take them.
func coopRoute(exact, exactInHalf, halvesFirst, splitWFits bool, elems int) bool {
	return !exact || exactInHalf || halvesFirst || elems >= coopExactInTileElems && splitWFits
}

// coopExactInTileElems is the fewest elements of weights not exact in
// float16 whose exact products, when their halves are not made first (past
// coopHalfWBytes: an LM head of a large vocabulary), split them in each
// tile rather than run on the portable kernel. On the H200
// (BenchmarkExactHalvesFirst, bonsai-8b's weights in Q4_K, Q6_K and Q8_0),
// at 16-128 rows the tiles ran 1.1-3.0x the portable kernel's speed and
// 0.69-1.36x that of the halves made first; at 512 and 2048 rows 0.70-0.98x
// the latter, and whole exact prefills (BenchmarkPrefillExactSplitW) took
// 1.03-1.38x as long but for bonsai-8b Q8_0 at T=128 (0.98x), so the halves
// stay first where they fit. The logit lens over a Q6_K head of 151,936 x
// 2,048 ran 1.2-1.3x faster (BenchmarkLogitLens, T=128 and 512, on the
// 2 x 4 tile the halves take; the split tile is 4 x 2 since). Smaller
// weights keep the portable kernel: 2048 x 768 and 256 x 256 ran at
// 0.70-1.07x its speed in the tiles, and tiny-qwen3moe's exact prefills
// spent 1.28-1.57x as long in their products (768 x 2048, Qwen3-30B-A3B's
// expert gate and up, ran 1.11-1.96x faster in the tiles; not measured in a
// prefill). Tests set it to check and time each.
var coopExactInTileElems = coopHalfWSmallElems

// coopSplitK splits cooperative products with too few tiles to fill the
// device along K (tests turn it off to check and time both). A product of
// fewer than coopSplitBelow workgroups (coopSplitBelowLate for tiles that
// load late, coopSplitBelowExact at exact precision) is cut into enough
// parts for about coopSplitGroups, at most coopSplitMax of at least
// coopSplitChunk columns of K each, and
// splitk.comp adds the parts. On the H200 (BenchmarkSplitK, 4096 columns
// of K) that ran 1.7-3x faster for 8-32 workgroups (4096 x 4096 and
// 1024 x 4096 weights at T=128, 1024 x 4096 at T=512), and slower for 96
// and 128 (12288 x 4096 at T=128, 4096 x 4096 at T=512) with tiles of
// over 128 registers, one workgroup per SM on its 132. The late tile
// holds 128, two per SM, and products of 96 and 128 workgroups leave half
// of those places empty: split, fast prefills at T=512 ran 1.12-1.26x
// (bonsai-1.7b) and 1.04-1.09x (bonsai-8b) faster (BenchmarkPrefillSplitK).
// Where the products of one call (Q, K and V) have coopSplitTotal
// workgroups together, none of them on the late tile is split: at T=1024
// and 2048, splitting K and V where Q and they had 256 to 768 ran 1-2%
// slower. Other tiles keep the rule measured for them, per product. At
// exact precision that is below 65 workgroups: products of 64 (bonsai-1.7b's
// Q, O and down projections at T=512) fill under half of the 132 places, and
// split, their products took 21.0 ms of device time against 26.3 (bonsai-1.7b
// exact prefills at T=512 1.17x faster, strata bench); splitting bonsai-8b's
// 96 (gate and up at T=128) was no faster (BenchmarkPrefillSplitExact).
var coopSplitK = true

// Variables for the benchmarks.
var coopSplitBelow, coopSplitBelowLate, coopSplitBelowExact, coopSplitTotal = 64, 160, 65, coopSplitGroups

const (
	coopSplitGroups = 256
	coopSplitMax    = 8
	coopSplitChunk  = 512
)

// splitPlan is how one cooperative product is split along K: parts of
// chunk columns, written to bytes [lo, hi) of the stream's parts buffer.
type splitPlan struct {
	parts, chunk int
	lo, hi       uint64
}

// splitPlans plans the split of each product of a MatMul (nil: none).
func (s *stream) splitPlans(rows, cols int, outs []backend.Proj, halfW []halfRange) []splitPlan {
	if !coopSplitK || cols < 2*coopSplitChunk {
		return nil
	}
	// The products of one call run together: each product's workgroups,
	// and all of them, for the rule.
	tiles, groups, total := make([]coopTile, len(outs)), make([]int, len(outs)), 0
	for i, p := range outs {
		var hw halfRange
		if halfW != nil {
			hw = halfW[i]
		}
		if m, ok := p.W.(*matrix); ok && s.takesCoop(rows, m, hw) {
			tiles[i] = s.coopTileFor(s.precision == backend.PrecisionExact, m, hw)
			groups[i] = int(ceilDiv(m.w.Rows, tiles[i].bn()) * ceilDiv(rows, tiles[i].bm()))
			total += groups[i]
		}
	}
	plans := make([]splitPlan, len(outs))
	var end uint64
	for i, p := range outs {
		t, n := tiles[i], groups[i]
		below := coopSplitBelow
		if s.precision == backend.PrecisionExact {
			below = coopSplitBelowExact
		}
		if t.late {
			below = coopSplitBelowLate
			if total >= coopSplitTotal {
				continue
			}
		}
		if n == 0 || n >= below {
			continue
		}
		m := p.W.(*matrix)
		parts := min(coopSplitMax, (coopSplitGroups+n-1)/n, cols/coopSplitChunk)
		if parts < 2 {
			continue
		}
		chunk := (cols + parts - 1) / parts
		chunk = (chunk + t.bk - 1) / t.bk * t.bk // matmul_coop.comp steps through whole tiles of k
		parts = (cols + chunk - 1) / chunk
		size := 4 * uint64(parts) * uint64(rows) * uint64(m.w.Rows)
		plans[i] = splitPlan{parts: parts, chunk: chunk, lo: end, hi: end + size}
		end += size
	}
	if end == 0 {
		return nil
	}
	if s.parts = s.helper(s.parts, end); s.parts == nil {
		return nil
	}
	return plans
}

// coopHalfWRows is, at each precision, the fewest rows of x for which the
// weights of a format not exact in float16 are decoded to float16 once
// (weights16.comp) before a cooperative product. Below it, at fast
// precision, each tile of rows decodes them itself; at exact precision the
// product runs on the portable kernel (or, for weights of
// coopExactInTileElems or more, has the tiles split them). On the H200
// (BenchmarkExactHalvesFirst, bonsai-8b's three weight shapes in Q4_K, Q6_K
// and Q8_0, 16 to 128 rows) the halves made first ran level with the
// portable kernel or up to 3.8x faster in 35 of 36 products, and bonsai-8b
// Q4_K prefills of 16-64 tokens 1.9-2.0x faster (bonsai-1.7b 2.1-2.2x), so
// exact precision makes them from the fewest rows the GEMMs take.
//
// That is for weights of at least coopHalfWSmallElems elements; smaller
// ones keep 128 at exact precision. On the H200 a tiny-qwen3moe prefill
// (256 x 256 experts on 8-32 rows each) ran 1.2-1.4x slower at 32-128
// tokens with the halves made first: the two dispatches more cost more
// than the portable kernel takes. The bonsai shapes' weights, where the
// halves paid, hold 2^21 elements and more; between the two (Qwen3-30B-A3B's
// 768 x 2048 experts) nothing was measured. Tests set it to time and check
// each.
var coopHalfWRows = halfWRows{fast: 128, exact: vecRows + 1, smallExact: 128}

// halfWRows is coopHalfWRows at each precision, and for small weights at
// exact precision.
type halfWRows struct{ fast, exact, smallExact int }

const coopHalfWSmallElems = 1 << 21

// fewestHalfWRows is coopHalfWRows for a weight of elems elements.
func fewestHalfWRows(exact bool, elems int) int {
	switch {
	case !exact:
		return coopHalfWRows.fast
	case elems < coopHalfWSmallElems:
		return coopHalfWRows.smallExact
	}
	return coopHalfWRows.exact
}

// coopHalfWBytes caps the float16 weights of one MatMul: past it (an LM
// head of a large vocabulary) the tiles decode the weights themselves, at
// exact precision into hi + lo halves for weights of coopExactInTileElems
// or more (the portable kernel takes smaller ones).
const coopHalfWBytes = 512 << 20

// halfRange is where weights16.comp left one projection's weights in the
// stream's halfW buffer: uvec4s from base (and the remainders from loBase,
// when split), a word per row from bigBase; bytes [lo, hi). ok is false for
// a projection whose tiles decode their own weights. direct: the weights
// are float16 already (F16), read where they are, with no range flags.
type halfRange struct {
	ok, split, direct     bool
	base, loBase, bigBase uint32
	lo, hi                uint64
}

// noRangeFlags is bigBase for weights that are float16 already.
const noRangeFlags = ^uint32(0)

// halfWeights decodes to float16, in the stream's halfW buffer, the weights
// of each projection of a MatMul that are not exact in float16, when x goes
// to the cooperative GEMM in float16 and rows is enough to repay it; F16
// weights get a direct range, read where they are.
func (s *stream) halfWeights(rows, cols int, outs []backend.Proj) []halfRange {
	ranges, end := s.planHalfWeights(rows, cols, outs)
	if ranges == nil {
		return nil
	}
	if end > 0 {
		if s.halfW = s.helper(s.halfW, end); s.halfW == nil {
			return nil
		}
	}
	for i, p := range outs {
		if ranges[i].ok && !ranges[i].direct {
			s.weightsToHalf(p.W.(*matrix), s.halfW, ranges[i])
		}
	}
	return ranges
}

// planHalfWeights lays out halfWeights' buffer (end bytes), recording
// nothing; nil where no projection's tiles read float16 weights. F16
// weights are read as they are, for any number of rows: decoded in the
// tiles, two bytes at a time, they ran 1.7-5x slower than Q1_0_g128.
func (s *stream) planHalfWeights(rows, cols int, outs []backend.Proj) (ranges []halfRange, end uint64) {
	if rows <= vecRows || !s.b.coop || !coopHalfX || cols%8 != 0 {
		return nil, 0
	}
	split := s.precision == backend.PrecisionExact
	fits := !split || s.splitWFits()
	ranges = make([]halfRange, len(outs))
	used := false
	for i, p := range outs {
		m, ok := p.W.(*matrix)
		if !ok || m.w.Cols != cols {
			continue
		}
		if m.f.typ == gguf.F16 {
			ranges[i], used = halfRange{ok: true, direct: true, bigBase: noRangeFlags}, true
			continue
		}
		if !fits || m.f.exactInHalf() || rows < fewestHalfWRows(split, m.w.Rows*m.w.Cols) {
			continue
		}
		used = true
		halves := 2 * uint64(m.w.Rows) * uint64(cols)
		r := halfRange{ok: true, split: split, base: uint32(end / 16), loBase: uint32(end / 16), lo: end}
		end += halves
		if split {
			r.loBase, end = uint32(end/16), end+halves
		}
		r.bigBase = uint32(end / 4)
		end += (4*uint64(m.w.Rows) + 15) &^ 15 // keeps the next range 16-byte aligned
		r.hi = end
		ranges[i] = r
	}
	if !used || end > coopHalfWBytes {
		return nil, 0
	}
	return ranges, end
}

// weightsToHalf records weights16.comp: m in float16 into r of dst.
func (s *stream) weightsToHalf(m *matrix, dst *buffer, r halfRange) {
	gx, gy, gz := gridRows(m.w.Rows)
	s.dispatch("weights16_"+m.f.suffix, nil,
		[]use{{buf: m.buf, bind: m.off, bindSize: m.size}, {buf: dst, write: true, lo: r.lo, hi: r.hi}},
		[]uint32{uint32(m.w.Rows), uint32(m.w.Cols), m.scaleBase, r.base, r.loBase, r.bigBase, b2u(r.split)}, gx, gy, gz)
}

// coopHalfX converts x to float16 once per product (tohalf.comp) rather
// than in each cooperative GEMM tile; tests turn it off to time both.
var coopHalfX = true

// toHalf records tohalf.comp for rows x cols of x (cols % 8 == 0) into the
// stream's half buffer: the float16 x (hi parts at exact precision), from
// uvec4 loBase the remainders (exact only), from word bigBase a flag per
// row. It returns nil after failing the stream.
func (s *stream) toHalf(x *tensor, rows, cols int, exact bool) (buf *buffer, loBase, bigBase uint32) {
	return s.toHalfIn(&s.half, x, rows, cols, exact)
}

// toHalfIn is toHalf into the stream's helper buffer *dst.
func (s *stream) toHalfIn(dst **buffer, x *tensor, rows, cols int, exact bool) (buf *buffer, loBase, bigBase uint32) {
	chunks := uint64(rows) * uint64(cols) / 8 // uvec4s of one copy
	words := 4 * chunks
	if exact {
		words *= 2
	}
	if words+uint64(rows) > math.MaxUint32 {
		s.fail(fmt.Errorf("vulkan: %d x %d activations in float16 pass 2^32 words", rows, cols))
		return nil, 0, 0
	}
	if *dst = s.helper(*dst, 4*(words+uint64(rows))); *dst == nil {
		return nil, 0, 0
	}
	gx, gy, gz := gridRows(rows)
	s.dispatch("tohalf", nil, []use{x.reads(), {buf: *dst, write: true}},
		[]uint32{uint32(rows), uint32(cols), uint32(chunks), uint32(words), b2u(exact)}, gx, gy, gz)
	return *dst, uint32(chunks), uint32(words)
}

// ropeKey identifies the cos/sin table a stream last uploaded.
type ropeKey struct {
	pos0, rows int
	rope       *model.Rope // a model's, which does not change
}

func (s *stream) Rope(dst, src backend.Tensor, rows, heads, headDim, pos0 int, r *model.Rope) {
	ds, xs := s.tensorOf(dst), s.tensorOf(src)
	if !s.fits("rope", []*tensor{ds, xs}, rows*heads*headDim, rows*heads*headDim) {
		return
	}
	if r.Dim <= 0 || r.Dim%2 != 0 || r.Dim > headDim {
		s.fail(fmt.Errorf("vulkan: rope over %d dims of a %d-dim head", r.Dim, headDim))
		return
	}
	half := r.Dim / 2
	if rows == 0 || !s.begin() {
		return
	}
	// The table is computed on the host exactly as the CPU backend does, once
	// per prefill: every layer's Q and K reuse it.
	key := ropeKey{pos0: pos0, rows: rows, rope: r}
	if s.rope == nil || s.ropeKey != key {
		table := make([]float32, 2*rows*half)
		cos, sin := make([]float32, half), make([]float32, half)
		for t := range rows {
			r.Angles(pos0+t, cos, sin)
			for i := range half {
				table[2*(t*half+i)], table[2*(t*half+i)+1] = cos[i], sin[i]
			}
		}
		if s.rope = s.helper(s.rope, 4*uint64(len(table))); s.rope == nil {
			return
		}
		s.writeBytes(s.rope, 0, unsafe.Slice((*byte)(unsafe.Pointer(&table[0])), 4*len(table)))
		s.ropeKey = key
	}
	neox := uint32(0)
	if r.Mode == model.RopeNeoX {
		neox = 1
	}
	gx, gy, gz := grid1(rows*heads*(headDim-half), 256)
	s.dispatch("rope", nil, []use{ds.writes(), xs.reads(), {buf: s.rope}},
		[]uint32{uint32(rows), uint32(heads), uint32(headDim), uint32(half), neox}, gx, gy, gz)
}

// attention checks an Attention's geometry and tensors.
func (s *stream) attention(kernel string, a *backend.Attention, ts map[string]backend.Tensor) map[string]*tensor {
	if a.T <= 0 || a.Pos0 < 0 || a.Heads <= 0 || a.KVHeads <= 0 || a.Heads%a.KVHeads != 0 || a.HeadDim <= 0 {
		s.fail(fmt.Errorf("vulkan: %s of %d queries at %d with %d heads, %d kv heads of %d dims is malformed", kernel, a.T, a.Pos0, a.Heads, a.KVHeads, a.HeadDim))
		return nil
	}
	keys, qd, kvd := a.Keys(), a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	needs := map[string]int{"Q": a.T * qd, "K": keys * kvd, "V": keys * kvd, "Z": a.T * qd, "Scores": a.Heads * a.T * keys, "Pattern": a.Heads * a.T * keys}
	out := map[string]*tensor{}
	for name, t := range ts {
		if t == nil {
			s.fail(fmt.Errorf("vulkan: %s without %s", kernel, name))
			return nil
		}
		x := s.tensorOf(t)
		if !s.fits(kernel, []*tensor{x}, needs[name]) {
			return nil
		}
		out[name] = x
	}
	return out
}

// attnPush is the push-constant block of scores.comp, mix.comp and flash.comp.
type attnPush struct {
	t, keys, heads, kvHeads, hd, pos0 uint32
	scale                             float32
	window                            uint32
	softcap                           float32
}

func pushOf(a *backend.Attention) *attnPush {
	return &attnPush{uint32(a.T), uint32(a.Keys()), uint32(a.Heads), uint32(a.KVHeads), uint32(a.HeadDim), uint32(a.Pos0), a.Scale, uint32(a.Window), a.Softcap}
}

// words lays the block out; mix.comp has no scale, window or cap.
func (a *attnPush) words(withScale bool) []uint32 {
	w := []uint32{a.t, a.keys, a.heads, a.kvHeads, a.hd, a.pos0}
	if withScale {
		w = append(w, f32(a.scale), a.window, f32(a.softcap))
	}
	return w
}

func (s *stream) AttnScores(a *backend.Attention) {
	t := s.attention("attention scores", a, map[string]backend.Tensor{"Q": a.Q, "K": a.K, "Scores": a.Scores})
	if t == nil {
		return
	}
	kernel, specs := s.attnTile("scores")
	s.dispatch(kernel, specs, []use{t["Q"].reads(), t["K"].reads(), t["Scores"].writes()},
		pushOf(a).words(true), ceilDiv(a.Keys(), tile), ceilDiv(a.T, tile), uint32(a.Heads))
}

func (s *stream) Softmax(dst, src backend.Tensor, rows, n int) {
	s.softmax(dst, src, rows, n, []uint32{0, 0, 0, 0})
}

// causalSoftmax is Softmax of a's causally masked scores into its pattern,
// reading only each query's keys; the zeros around them are written unless
// held says the pattern has them from a prefill of the same layout.
func (s *stream) causalSoftmax(a *backend.Attention, held bool) {
	s.softmax(a.Pattern, a.Scores, a.Heads*a.T, a.Keys(), []uint32{uint32(a.T), uint32(a.Pos0), uint32(a.Window), b2u(held)})
}

// softmax dispatches softmax.comp; causal is its t, pos0, window and held
// (t = 0: whole rows).
func (s *stream) softmax(dst, src backend.Tensor, rows, n int, causal []uint32) {
	d, x := s.tensorOf(dst), s.tensorOf(src)
	if !s.fits("softmax", []*tensor{d, x}, rows*n, rows*n) {
		return
	}
	gx, gy, gz := gridRows(rows)
	kernel := "softmax"
	if s.b.subgroups {
		kernel += "_sg"
	}
	s.dispatch(kernel, []uint32{s.b.reduceWG}, []use{d.writes(), x.reads()},
		append([]uint32{uint32(rows), uint32(n)}, causal...), gx, gy, gz)
}

func (s *stream) AttnMix(a *backend.Attention) {
	t := s.attention("attention mix", a, map[string]backend.Tensor{"Pattern": a.Pattern, "V": a.V, "Z": a.Z})
	if t == nil {
		return
	}
	kernel, specs := s.attnTile("mix")
	s.dispatch(kernel, specs, []use{t["Pattern"].reads(), t["V"].reads(), t["Z"].writes()},
		pushOf(a).words(false), ceilDiv(a.HeadDim, tile), ceilDiv(a.T, tile), uint32(a.Heads))
}

// attnTile is the variant of scores.comp or mix.comp to run: on cooperative
// matrices where the device has them (tile_coop.glsl, at the stream's
// precision), else on the shader cores in float32.
func (s *stream) attnTile(kernel string) (string, []uint32) {
	if !s.b.coop {
		return kernel, nil
	}
	return kernel + "_coop", []uint32{b2u(s.precision == backend.PrecisionExact)}
}

func (s *stream) FlashAttention(a *backend.Attention) { s.flash(a, false, false) }

// FlashAttentionCapture is attention that also writes the scores and the
// pattern, on cooperative matrices: flash_coop.comp writes the scores as it
// computes Z and softmax.comp makes the pattern of them. Their masked
// entries (-inf and 0: half of a causal prefill's) are written only where
// the tensors do not hold them from a capture of the same layout: a sweep
// reuses its closed traces' arenas, and a layer its scratch.
func (s *stream) FlashAttentionCapture(a *backend.Attention) bool {
	if !s.coopFlash(a.HeadDim) {
		return false
	}
	scores, pattern := s.tensorOf(a.Scores), s.tensorOf(a.Pattern)
	if scores == nil || pattern == nil {
		return true // the stream's error says why
	}
	sl := maskLayout{heads: a.Heads, t: a.T, pos0: a.Pos0, keys: a.Keys(), window: a.Window}
	pl := sl
	pl.pattern = true
	heldS, heldP := scores.masksHeld(sl), pattern.masksHeld(pl)
	if f := s.b.onMasksKept.Load(); heldS && f != nil {
		(*f)()
	}
	s.flash(a, true, heldS)
	s.causalSoftmax(a, heldP)
	if s.err == nil {
		scores.masksWritten(sl)
		pattern.masksWritten(pl)
	}
	return true
}

// maskLayout is what the masked entries of a capture of attention scores
// (-inf) or of its pattern (0) depend on.
type maskLayout struct {
	heads, t, pos0, keys, window int
	pattern                      bool
}

// heldMasks is a range of a buffer (from its key to end) whose masked
// entries hold what layout puts there.
type heldMasks struct {
	end    uint64
	layout maskLayout
}

// masksHeld reports whether t's masked entries hold what l puts there: a
// capture of layout l wrote them, and nothing has written in t since (access
// forgets the masks of every range a command writes). Recorded work is
// always submitted (stream.submit), so what was recorded has run by the
// time a later command runs.
func (t *tensor) masksHeld(l maskLayout) bool {
	off, n := t.extent()
	m, ok := t.buf.masks[off]
	return ok && m.end == off+n && m.layout == l
}

// masksWritten records that t's masked entries hold what l puts there.
func (t *tensor) masksWritten(l maskLayout) {
	off, n := t.extent()
	if t.buf.masks == nil {
		t.buf.masks = map[uint64]heldMasks{}
	}
	t.buf.masks[off] = heldMasks{off + n, l}
}

// forgetMasks drops what is known of the masked entries in [lo, hi) of
// buf (all of it when lo >= hi): a command writes there.
func (buf *buffer) forgetMasks(lo, hi uint64) {
	for off, m := range buf.masks {
		if lo >= hi || off < hi && m.end > lo {
			delete(buf.masks, off)
		}
	}
}

// flash dispatches flash attention, writing the scores too with capture
// (flash_coop.comp only), their masked tails unless tailsHeld.
func (s *stream) flash(a *backend.Attention, capture, tailsHeld bool) {
	ts := map[string]backend.Tensor{"Q": a.Q, "K": a.K, "V": a.V, "Z": a.Z}
	if capture {
		ts["Scores"] = a.Scores
	}
	t := s.attention("flash attention", a, ts)
	if t == nil {
		return
	}
	// flash.comp's shared arrays: staged Q and K slices and transposed
	// scores (rows padded by 4), two partial sums and a rescale per row.
	shared := 4 * ((flashKeys+2*flashDims)*(flashRows+4) + 3*flashRows)
	if limit := int(s.b.phys.props.Limits.MaxComputeSharedMemorySize); a.HeadDim > maxHeadD || shared > limit {
		s.fail(fmt.Errorf("vulkan: flash attention over %d-dim heads needs %d bytes of shared memory (the device has %d) and at most %d dims; capture the pattern to use the materialised path", a.HeadDim, shared, limit, maxHeadD))
		return
	}
	// A workgroup takes rows of (query, head), its heads from one GQA group
	// so that they share each K/V tile.
	kernel, rows, specs := "flash", flashRows, []uint32{uint32(a.HeadDim), b2u(a.Window > 0), b2u(a.Softcap != 0)}
	uses := []use{t["Q"].reads(), t["K"].reads(), t["V"].reads(), t["Z"].writes()}
	exact := s.precision == backend.PrecisionExact
	coop := s.coopFlash(a.HeadDim)
	apart, kv16 := false, false
	if coop {
		rows, apart, kv16 = s.flashLayout(a)
	}
	wgHeads := flashHeads(a.Heads/a.KVHeads, rows)
	blocks := ceilDiv(a.T, rows/wgHeads) // query blocks: each reads K and V
	push := append(pushOf(a).words(true), uint32(wgHeads), b2u(tailsHeld))
	if coop {
		kernel, specs = "flash_coop", append(specs, 2*uint32(rows), b2u(exact))
		// Unused bindings still need a buffer.
		scores, kh, vh := t["Q"].reads(), t["Q"].reads(), t["Q"].reads()
		if capture {
			kernel, scores = "flash_coop_capture", t["Scores"].writes()
		}
		var loBase, bigBase uint32
		if kv16 {
			kvd := a.KVHeads * a.HeadDim
			var kb, vb *buffer
			if kb, loBase, bigBase = s.toHalfIn(&s.halfK, t["K"], a.Keys(), kvd, exact); kb == nil {
				return
			}
			if vb, _, _ = s.toHalfIn(&s.halfV, t["V"], a.Keys(), kvd, exact); vb == nil {
				return
			}
			kh, vh = use{buf: kb}, use{buf: vb}
		}
		specs = append(specs, b2u(kv16), b2u(apart))
		uses = append(uses, scores, kh, vh)
		push = append(push, loBase, bigBase)
	}
	s.dispatch(kernel, specs, uses, push, blocks, uint32(a.Heads/wgHeads), 1)
}

// flash_coop.comp's choices for long prompts (measured on the H200,
// docs/PERFORMANCE.md): from flashHalfKVFrom queries on, K and V are
// converted to float16 once (tohalf.comp) rather than in every workgroup
// that reads them, and from flashWideFrom on, workgroups take 128 rows
// instead of 64. At T=2048 the two made it 1.6-1.8x faster at fast
// precision and 1.1-1.4x at exact (128 rows there staging K and V in
// turn); at T=256 each was slower: the conversion's two dispatches, and
// half the workgroups for the device's cores.
var flashHalfKVFrom, flashWideFrom = 1024, 1024

// flashApart makes flash_coop.comp stage K and V in turn wherever it
// takes 128 rows (tests use it: otherwise only where both do not fit).
var flashApart = false

// flashLayout is how flash_coop.comp takes a: its workgroups' rows (16 for
// each subgroup), whether they stage a block's K and V in turn to fit 128
// rows in the device's shared memory (as exact precision's halves need in
// 48 KiB), and whether they read K and V converted to float16 once. 64
// rows fit wherever coopFlash chose the kernel.
func (s *stream) flashLayout(a *backend.Attention) (rows int, apart, halves bool) {
	exact, l := s.precision == backend.PrecisionExact, &s.b.phys.props.Limits
	halves = a.T >= flashHalfKVFrom
	if a.T >= flashWideFrom && l.MaxComputeWorkGroupInvocations >= 256 && l.MaxComputeWorkGroupSize[0] >= 256 {
		limit := int(l.MaxComputeSharedMemorySize)
		if !flashApart && flashCoopShared(exact, 128, false) <= limit {
			return 128, false, halves
		}
		if flashCoopShared(exact, 128, true) <= limit {
			return 128, true, halves
		}
	}
	return 64, false, halves
}

// flashCoopShared is flash_coop.comp's shared memory: K and V of a block
// of 32 keys and 128 dims in float16 (one of them at a time, apart), hi
// and lo at exact precision (rows padded by 8); each subgroup's 16 rows of
// scores (float32, padded by 4) or of probabilities (float16, by 8; hi and
// lo), whichever is larger; and a float per invocation.
func flashCoopShared(exact bool, rows int, apart bool) int {
	halves, staged := 1, 2
	if exact {
		halves = 2
	}
	if apart {
		staged = 1
	}
	return halves*staged*32*136*2 + rows*max(36*4, halves*40*2) + 2*rows*4 + 4
}

// coopFlash reports whether flash attention runs on cooperative matrices:
// on heads of whole 16-dim tiles up to 128, where its shared memory fits.
func (s *stream) coopFlash(headDim int) bool {
	return s.b.coop && headDim%16 == 0 && headDim <= 128 && s.b.phys.subgroupArithmetic() &&
		flashCoopShared(s.precision == backend.PrecisionExact, 64, false) <= int(s.b.phys.props.Limits.MaxComputeSharedMemorySize)
}

// flashHeads is how many heads of a GQA group of g share a flash workgroup
// of rows: the largest divisor of g that fits.
func flashHeads(g, rows int) int {
	for n := min(g, rows); ; n-- {
		if g%n == 0 {
			return n
		}
	}
}

func (s *stream) Add(dst, a, b backend.Tensor, n int) {
	d, x, y := s.tensorOf(dst), s.tensorOf(a), s.tensorOf(b)
	if !s.fits("add", []*tensor{d, x, y}, n, n, n) {
		return
	}
	gx, gy, gz := grid1(n, 256)
	s.dispatch("add", nil, []use{d.writes(), x.reads(), y.reads()}, []uint32{uint32(n)}, gx, gy, gz)
}

func (s *stream) SwiGLU(dst, gate, up backend.Tensor, n int) {
	d, g, u := s.tensorOf(dst), s.tensorOf(gate), s.tensorOf(up)
	if !s.fits("swiglu", []*tensor{d, g, u}, n, n, n) {
		return
	}
	gx, gy, gz := grid1(n, 256)
	s.dispatch("swiglu", nil, []use{d.writes(), g.reads(), u.reads()}, []uint32{uint32(n)}, gx, gy, gz)
}

func (s *stream) GELU(dst, src backend.Tensor, n int) {
	d, x := s.tensorOf(dst), s.tensorOf(src)
	if !s.fits("gelu", []*tensor{d, x}, n, n) {
		return
	}
	gx, gy, gz := grid1(n, 256)
	s.dispatch("gelu", nil, []use{d.writes(), x.reads()}, []uint32{uint32(n)}, gx, gy, gz)
}

func (s *stream) GeGLU(dst, gate, up backend.Tensor, n int) {
	d, g, u := s.tensorOf(dst), s.tensorOf(gate), s.tensorOf(up)
	if !s.fits("geglu", []*tensor{d, g, u}, n, n, n) {
		return
	}
	gx, gy, gz := grid1(n, 256)
	s.dispatch("geglu", nil, []use{d.writes(), g.reads(), u.reads()}, []uint32{uint32(n)}, gx, gy, gz)
}

func (s *stream) Softcap(x backend.Tensor, n int, cap float32) {
	d := s.tensorOf(x)
	if !s.fits("softcap", []*tensor{d}, n) {
		return
	}
	gx, gy, gz := grid1(n, 256)
	s.dispatch("softcap", nil, []use{d.writes()}, []uint32{uint32(n), f32(cap)}, gx, gy, gz)
}

func (s *stream) Copy(dst backend.Tensor, dstOff int, src backend.Tensor, srcOff, n int) {
	d, x := s.tensorOf(dst), s.tensorOf(src)
	if d == nil || x == nil {
		return
	}
	if dstOff < 0 || srcOff < 0 || n < 0 || dstOff > d.n || n > d.n-dstOff || srcOff > x.n || n > x.n-srcOff {
		s.fail(fmt.Errorf("vulkan: copy of %d elements from %s at %d (of %d) to %s at %d (of %d) is out of range", n, x.name, srcOff, x.n, d.name, dstOff, d.n))
		return
	}
	dstOff, srcOff = d.first+dstOff, x.first+srcOff // views' places in their buffers
	if d.buf == x.buf && dstOff < srcOff+n && srcOff < dstOff+n && dstOff != srcOff {
		s.fail(fmt.Errorf("vulkan: copy within %s between overlapping ranges", d.name))
		return
	}
	if d.buf == x.buf && dstOff == srcOff {
		return
	}
	if copyShader && d.buf.mapped == nil && x.buf.mapped == nil && n > 0 {
		s.copyOnCores(d.buf, dstOff, x.buf, srcOff, n)
		return
	}
	s.copyBuffer(d.buf, 4*uint64(dstOff), x.buf, 4*uint64(srcOff), 4*uint64(n))
}

// copyShader says device-local copies run copy.comp rather than the copy
// command (a benchmark compares the two).
var copyShader = true

// copyOnCores copies n floats between device-local buffers with copy.comp,
// binding only the ranges it touches (from an aligned offset), so that no
// binding passes the device's largest.
func (s *stream) copyOnCores(dst *buffer, dstOff int, src *buffer, srcOff, n int) {
	align := max(uint64(s.b.phys.props.Limits.MinStorageBufferOffsetAlignment), 16)
	span := func(buf *buffer, off int, write bool) (use, uint32) {
		lo, hi := 4*uint64(off), 4*uint64(off+n)
		bind := lo / align * align
		return use{buf: buf, write: write, lo: lo, hi: hi, bind: bind, bindSize: hi - bind}, uint32((lo - bind) / 4)
	}
	du, d := span(dst, dstOff, true)
	su, sr := span(src, srcOff, false)
	if limit := uint64(s.b.phys.props.Limits.MaxStorageBufferRange); du.bindSize > limit || su.bindSize > limit {
		s.copyBuffer(dst, 4*uint64(dstOff), src, 4*uint64(srcOff), 4*uint64(n))
		return
	}
	vec4s := n%4 == 0 && d%4 == 0 && sr%4 == 0
	per := 1
	if vec4s {
		per = 4
	}
	gx, gy, gz := grid1((n+per-1)/per, 256)
	s.dispatch("copy", nil, []use{du, su}, []uint32{uint32(n), d, sr, b2u(vec4s)}, gx, gy, gz)
}

func (s *stream) Edit(t backend.Tensor, e backend.Edit) {
	x := s.tensorOf(t)
	if x == nil {
		return
	}
	// The shared check bounds every field by the tensors' lengths, which
	// fit in the shader's 32-bit push constants.
	if err := e.Check(x.n); err != nil {
		s.fail(fmt.Errorf("vulkan: %s: %w", x.name, err))
		return
	}
	if e.Op == backend.EditMean {
		gx, gy, gz := grid1(e.Cols, 64)
		s.dispatch("edit_mean", nil, []use{x.writes()},
			[]uint32{uint32(e.Off), uint32(e.Rows), uint32(e.Cols), uint32(e.Stride)}, gx, gy, gz)
		return
	}
	src := x // Fill and Scale read no source; the binding still needs a buffer
	if e.Op == backend.EditSet || e.Op == backend.EditAdd {
		if src = s.tensorOf(e.Src); src == nil {
			return
		}
	} else {
		e.SrcOff, e.SrcStride = 0, 0
	}
	if e.Rows == 1 {
		e.Stride, e.SrcStride = 0, 0 // unused, and may be past 32 bits
	}
	gx, gy, gz := grid1(e.Rows*e.Cols, 256)
	s.dispatch("edit", nil, []use{x.writes(), src.reads()},
		[]uint32{uint32(e.Op), uint32(e.Off), uint32(e.Rows), uint32(e.Cols), uint32(e.Stride), f32(e.Scalar), uint32(e.SrcOff), uint32(e.SrcStride)},
		gx, gy, gz)
}

func (s *stream) Argmax(dst, src backend.Tensor, rows, n int) {
	d, x := s.tensorOf(dst), s.tensorOf(src)
	if !s.fits("argmax", []*tensor{d, x}, rows, rows*n) {
		return
	}
	gx, gy, gz := gridRows(rows)
	s.dispatch("argmax", []uint32{s.b.reduceWG}, []use{d.writes(), x.reads()},
		[]uint32{uint32(rows), uint32(n)}, gx, gy, gz)
}

func (s *stream) Rank(dst, src backend.Tensor, rows, n, col int) {
	d, x := s.tensorOf(dst), s.tensorOf(src)
	if col < 0 || col >= n {
		s.fail(fmt.Errorf("vulkan: rank of column %d in rows of %d", col, n))
		return
	}
	if !s.fits("rank", []*tensor{d, x}, rows, rows*n) {
		return
	}
	gx, gy, gz := gridRows(rows)
	s.dispatch("rank", []uint32{s.b.reduceWG}, []use{d.writes(), x.reads()},
		[]uint32{uint32(rows), uint32(n), uint32(col)}, gx, gy, gz)
}

func (s *stream) RowNorms(dst, src backend.Tensor, off, rows, n int) {
	d, x := s.tensorOf(dst), s.tensorOf(src)
	if d == nil || x == nil {
		return
	}
	if off < 0 || rows < 0 || n < 0 || d.n < rows || off > x.n || rows*n > x.n-off {
		s.fail(fmt.Errorf("vulkan: norms of %d rows of %d at %d of %s (%d elements)", rows, n, off, x.name, x.n))
		return
	}
	gx, gy, gz := gridRows(rows)
	s.dispatch("rownorm", []uint32{s.b.reduceWG}, []use{d.writes(), x.reads()},
		[]uint32{uint32(rows), uint32(n), uint32(off)}, gx, gy, gz)
}

func (s *stream) Route(ids, weights, logits backend.Tensor, rows, experts, k int) {
	i, w, x := s.tensorOf(ids), s.tensorOf(weights), s.tensorOf(logits)
	if !s.fits("route", []*tensor{i, w, x}, rows*k, rows*k, rows*experts) {
		return
	}
	if k < 1 || k > experts {
		s.fail(fmt.Errorf("vulkan: routing to %d of %d experts", k, experts))
		return
	}
	gx, gy, gz := grid1(rows, 64)
	s.dispatch("route", nil, []use{i.writes(), w.writes(), x.reads()},
		[]uint32{uint32(rows), uint32(experts), uint32(k)}, gx, gy, gz)
}

func (s *stream) GatherRows(dst, src backend.Tensor, rows []int32, cols int) {
	s.moveRows("gather_rows", dst, src, rows, cols, true)
}

func (s *stream) ScatterRows(dst, src backend.Tensor, rows []int32, cols int) {
	s.moveRows("scatter_rows", dst, src, rows, cols, false)
}

// moveRows gathers (or scatters) rows of cols floats by an index list,
// checked against the tensors before it reaches the device.
func (s *stream) moveRows(name string, dst, src backend.Tensor, rows []int32, cols int, gather bool) {
	d, x := s.tensorOf(dst), s.tensorOf(src)
	if d == nil || x == nil || len(rows) == 0 {
		return
	}
	indexed, packed := x, d
	if !gather {
		indexed, packed = d, x
	}
	if len(rows)*cols > packed.n {
		s.fail(fmt.Errorf("vulkan: %s of %d rows of %d into %s of %d elements", name, len(rows), cols, packed.name, packed.n))
		return
	}
	for i, r := range rows {
		if r < 0 || (int(r)+1)*cols > indexed.n {
			s.fail(fmt.Errorf("vulkan: %s: row %d (index %d) is outside %s's %d rows", name, r, i, indexed.name, indexed.n/cols))
			return
		}
	}
	if !s.begin() {
		return
	}
	if s.rowIdx = s.helper(s.rowIdx, 4*uint64(len(rows))); s.rowIdx == nil {
		return
	}
	s.writeBytes(s.rowIdx, 0, unsafe.Slice((*byte)(unsafe.Pointer(&rows[0])), 4*len(rows)))
	gx, gy, gz := grid1(len(rows)*cols, 256)
	s.dispatch(name, nil, []use{d.writes(), x.reads(), {buf: s.rowIdx}},
		[]uint32{uint32(len(rows)), uint32(cols)}, gx, gy, gz)
}

func (s *stream) WeightedSum(dst, src, weights backend.Tensor, rows, k, cols int) {
	d, x, w := s.tensorOf(dst), s.tensorOf(src), s.tensorOf(weights)
	if !s.fits("weighted_sum", []*tensor{d, x, w}, rows*cols, rows*k*cols, rows*k) {
		return
	}
	gx, gy, gz := grid1(rows*cols, 256)
	s.dispatch("weighted_sum", nil, []use{d.writes(), x.reads(), w.reads()},
		[]uint32{uint32(rows), uint32(k), uint32(cols)}, gx, gy, gz)
}
