package vulkan

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/stratalab/strata/backend"
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
// (b16), split in hi + lo halves (wlo), a mixture's experts (grouped).
func (c coopTile) spec(exact bool, a16, b16, wlo uint32, grouped bool) []uint32 {
	return []uint32{uint32(c.tm), uint32(c.tn), uint32(c.wgm), uint32(c.bk), b2u(exact), a16, b16, wlo, b2u(!c.late), b2u(grouped)}
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
		pushWords(&embedPush{uint32(len(ids)), uint32(m.w.Cols), m.scaleBase}), x, y, z)
}

// subgroupNormDim is the widest row RMSNorm gives a subgroup rather than a
// workgroup: a head's Q/K norm (64-256 elements), not a model's 4096-wide
// rows (see docs/PERFORMANCE.md, "Norms on subgroups").
const subgroupNormDim = 256

func (s *stream) RMSNorm(dst, src, gain, scale backend.Tensor, rows, dim int, eps float32) {
	d, x, g := s.tensorOf(dst), s.tensorOf(src), s.tensorOf(gain)
	if !s.fits("rmsnorm", []*tensor{d, x, g}, rows*dim, rows*dim, dim) {
		return
	}
	sc, write := s.scaleOut(scale, d, rows)
	if sc == nil {
		return
	}
	kernel, perGroup := normKernel(s.tuning, s.b.dev, dim)
	gx, gy, gz := gridRows(int(ceilDiv(rows, perGroup)))
	s.dispatch(kernel, []uint32{s.b.reduceWG, uint32(perGroup)}, []use{d.writes(), x.reads(), g.reads(), sc.writes()},
		pushWords(&normPush{uint32(rows), uint32(dim), eps, write}), gx, gy, gz)
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
		pushWords(&normPush{uint32(rows), uint32(dim), eps, write}), gx, gy, gz)
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
	s.dispatch(name, []uint32{s.b.reduceWG}, uses, pushWords(&normApplyPush{uint32(rows), uint32(dim)}), gx, gy, gz)
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
	ms, dsts, biases := make([]*matrix, len(outs)), make([]*tensor, len(outs)), make([]*tensor, len(outs))
	ws := make([]weightShape, len(outs))
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
		if p.Bias != nil {
			if biases[i] = s.tensorOf(p.Bias); !s.fits(name, []*tensor{biases[i]}, m.w.Rows) {
				return
			}
		}
		ms[i], dsts[i], ws[i] = m, dst, shapeOf(m)
		ws[i].bias = biases[i] != nil
	}
	exact := s.precision != backend.PrecisionFast
	plan := planMatMul(s.tuning, s.b.dev, exact, rows, cols, ws)
	if !s.halfWeights(plan, ms) {
		return
	}
	if plan.parts > 0 {
		if s.parts = s.helper(s.parts, plan.parts); s.parts == nil {
			return
		}
	}
	var half *buffer // x in float16 for the cooperative products
	var loBase, bigBase uint32
	if plan.halfX {
		if half, loBase, bigBase = s.toHalfIn(&s.half, xs, rows, plan.halfXRows, cols, exact); half == nil {
			return
		}
	}
	var sums []func() // of the products split along K, after all of them
	// The projections read the same x and write different outputs, so they
	// are recorded back to back with no barrier between them.
	for i, pp := range plan.projs {
		m, dst := ms[i], dsts[i]
		bias, hasBias := xs, uint32(0) // an unused binding still needs a buffer
		if biases[i] != nil {
			bias, hasBias = biases[i], 1
		}
		uses := []use{xs.reads(), {buf: m.buf, bind: m.off, bindSize: m.size}, dst.writes(), bias.reads()}
		push := matmulPush{uint32(rows), uint32(m.w.Rows), uint32(cols), m.scaleBase, hasBias}
		switch pp.kernel {
		case gemmCoop:
			a16, xh := uint32(0), xs.reads() // an unused binding still needs a buffer
			if half != nil {
				a16, xh = 1, use{buf: half}
			}
			t, hw := pp.tile, pp.half
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
			if sp := pp.split; sp.parts > 1 {
				uses[2] = use{buf: s.parts, write: true, lo: sp.lo, hi: sp.hi}
				push.hasBias = 0 // splitk.comp adds the bias
				gz, kChunk, yBase = uint32(sp.parts), uint32(sp.chunk), uint32(sp.lo/4)
			}
			splitW := exact && !m.f.exactInHalf()
			// The groups table's binding goes unread here but still needs a buffer.
			s.dispatch("matmul_coop_"+m.f.suffix, t.spec(exact, a16, b2u(hw.ok), b2u(splitW), false), append(uses, xh, wh, xs.reads()),
				pushWords(&coopPush{push, loBase, bigBase, hw.base, hw.loBase, hw.bigBase, kChunk, yBase, 0}), gx, gy, gz)
		case gemmCoop2:
			s.coop2Product(pp, m, uses[:3], use{buf: half}, loBase, bigBase, exact, rows, cols)
		case gemmTiled:
			s.dispatch("matmul_"+m.f.suffix, []uint32{b2u(!exact), 0}, append(uses, xs.reads()), pushWords(&tiledPush{push, 0}),
				ceilDiv(m.w.Rows, tile), ceilDiv(rows, tile), 1)
		default:
			s.matvec(pp, m, append(uses, xs.reads()), tiledPush{push, 0}, 1, false)
		}
		if sp := pp.split; sp.parts > 1 {
			sums = append(sums, func() {
				s.sumParts(use{buf: s.parts, lo: sp.lo, hi: sp.hi}, dst, bias, hasBias, rows, m.w.Rows, sp.parts, sp.stride)
			})
		}
	}
	for _, sum := range sums {
		sum()
	}
}

// coop2Product records matmul_coop2.comp: whole tiles of rows into dst,
// the last, partial one into the stream's coop2Tail buffer and copied from
// there; split along K, every tile into its part in the stream's parts
// buffer, for splitk.comp to add. uses are x, the weight in its format and
// dst; xh is x in float16, as toHalfIn left it.
func (s *stream) coop2Product(pp projPlan, m *matrix, uses []use, xh use, loBase, bigBase uint32, exact bool, rows, cols int) {
	t, hw := pp.tile2, pp.half
	wh := use{buf: s.halfW, lo: hw.lo, hi: hw.hi}
	if hw.direct {
		wh = uses[1]
	}
	n := m.w.Rows
	push := coop2Push{N: uint32(n), K: uint32(cols), scaleBase: m.scaleBase, loBase: loBase, bigBase: bigBase,
		whBase: hw.base, wLoBase: hw.loBase, wBigBase: hw.bigBase}
	spec := t.spec(exact, hw.split)
	if sp := pp.split; sp.parts > 1 {
		push.M, push.yBase, push.kChunk, push.partStride = uint32(rows), uint32(sp.lo/4), uint32(sp.chunk), uint32(sp.stride)
		s.dispatch(t.kernel(m.f.suffix), spec, []use{uses[0], uses[1], {buf: s.parts, write: true, lo: sp.lo, hi: sp.hi}, xh, wh},
			pushWords(&push), uint32(n/t.bn), ceilDiv(rows, t.bm), uint32(sp.parts))
		return
	}
	whole := rows - rows%t.bm
	if whole > 0 {
		push.M = uint32(whole)
		s.dispatch(t.kernel(m.f.suffix), spec, []use{uses[0], uses[1], uses[2], xh, wh}, pushWords(&push),
			uint32(n/t.bn), uint32(whole/t.bm), 1)
	}
	if tail := rows - whole; tail > 0 {
		bytes := uint64(t.bm) * uint64(n) * 4
		if s.coop2Tail = s.helper(s.coop2Tail, bytes); s.coop2Tail == nil {
			return
		}
		push.M, push.mBase, push.yBase = uint32(tail), uint32(whole), 0
		s.dispatch(t.kernel(m.f.suffix), spec, []use{uses[0], uses[1], {buf: s.coop2Tail, write: true, hi: bytes}, xh, wh},
			pushWords(&push), uint32(n/t.bn), 1, 1)
		dst := uses[2]
		off := dst.lo + uint64(whole)*uint64(n)*4
		s.copyBuffer(dst.buf, off, s.coop2Tail, 0, uint64(tail)*uint64(n)*4)
	}
}

// matvec records matvec.comp (with subgroups for gemmMatvecSubgroup) over
// tiles workgroups along z, GROUPED or not; uses has its five bindings.
func (s *stream) matvec(pp projPlan, m *matrix, uses []use, push tiledPush, tiles uint32, grouped bool) {
	name, spec, outs := "matvec_"+m.f.suffix, []uint32{0, b2u(grouped)}, m.w.Rows
	if pp.kernel == gemmMatvecSubgroup {
		name, spec[0], outs = name+"_sg", uint32(pp.perGroup), int(ceilDiv(m.w.Rows, pp.perGroup))
	}
	gx, gy, _ := gridRows(outs)
	s.dispatch(name, spec, uses, pushWords(&push), gx, gy, tiles)
}

// sumParts records splitk.comp: dst (rows x cols) is the sum of parts
// products from part's range on, stride elements apart, plus the bias with
// hasBias.
func (s *stream) sumParts(part use, dst, bias *tensor, hasBias uint32, rows, cols, parts, stride int) {
	n := rows * cols
	gx, gy, gz := grid1(n, 256)
	s.dispatch("splitk", nil, []use{part, dst.writes(), bias.reads()},
		pushWords(&splitKPush{uint32(n), uint32(cols), uint32(parts), uint32(part.lo / 4), hasBias, uint32(stride)}), gx, gy, gz)
}

// A cooperative product with too few workgroups to fill the device is cut
// along K into enough parts for about coopSplitGroups workgroups, at most
// coopSplitMax of at least coopSplitChunk columns of K each, which
// splitk.comp adds.
const (
	coopSplitGroups = 256
	coopSplitMax    = 8
	coopSplitChunk  = 512
)

// splitPlan is how one cooperative product is split along K: parts of
// chunk columns, stride elements apart, written to bytes [lo, hi) of the
// stream's parts buffer.
type splitPlan struct {
	parts, chunk, stride int
	lo, hi               uint64
}

// coopHalfWBytes caps the float16 weights of one MatMul: past it (an LM
// head of a large vocabulary) the tiles decode the weights themselves, at
// exact precision into hi + lo halves for weights of Tuning.ExactInTileElems
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
// of each projection the plan takes in float16 first (F16 weights are read
// where they are); false after failing the stream.
func (s *stream) halfWeights(p matmulPlan, ms []*matrix) bool {
	if p.halfWBytes > 0 {
		if s.halfW = s.helper(s.halfW, p.halfWBytes); s.halfW == nil {
			return false
		}
	}
	for i, pp := range p.projs {
		if pp.half.ok && !pp.half.direct {
			s.weightsToHalf(ms[i], s.halfW, pp.half)
		}
	}
	return true
}

// weightsToHalf records weights16.comp: m in float16 into r of dst.
func (s *stream) weightsToHalf(m *matrix, dst *buffer, r halfRange) {
	gx, gy, gz := gridRows(m.w.Rows)
	s.dispatch("weights16_"+m.f.suffix, nil,
		[]use{{buf: m.buf, bind: m.off, bindSize: m.size}, {buf: dst, write: true, lo: r.lo, hi: r.hi}},
		pushWords(&weights16Push{uint32(m.w.Rows), uint32(m.w.Cols), m.scaleBase, r.base, r.loBase, r.bigBase, b2u(r.split)}), gx, gy, gz)
}

// toHalfIn records tohalf.comp for rows x cols of x (cols % 8 == 0) into
// the stream's helper buffer *dst: the float16 x (hi parts at exact
// precision), from uvec4 loBase the remainders (exact only), from word
// bigBase a flag per row. The buffer holds at least padRows rows of
// halves, so that a kernel may read whole tiles past the last row. It
// returns nil after failing the stream.
func (s *stream) toHalfIn(dst **buffer, x *tensor, rows, padRows, cols int, exact bool) (buf *buffer, loBase, bigBase uint32) {
	chunks := uint64(rows) * uint64(cols) / 8 // uvec4s of one copy
	words := 4 * chunks
	if exact {
		words *= 2
	}
	if words+uint64(rows) > math.MaxUint32 {
		s.fail(fmt.Errorf("vulkan: %d x %d activations in float16 pass 2^32 words", rows, cols))
		return nil, 0, 0
	}
	// Whole tiles past the last row read padRows rows from the halves'
	// start, and at exact precision from the remainders' too.
	padded := uint64(padRows) * uint64(cols) * 2
	if exact {
		padded += uint64(rows) * uint64(cols) * 2
	}
	if *dst = s.helper(*dst, max(4*(words+uint64(rows)), padded)); *dst == nil {
		return nil, 0, 0
	}
	gx, gy, gz := gridRows(rows)
	s.dispatch("tohalf", nil, []use{x.reads(), {buf: *dst, write: true}},
		pushWords(&toHalfPush{uint32(rows), uint32(cols), uint32(chunks), uint32(words), b2u(exact)}), gx, gy, gz)
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
		pushWords(&ropePush{uint32(rows), uint32(heads), uint32(headDim), uint32(half), neox}), gx, gy, gz)
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

// mixPushOf is a's geometry, the start of every attention kernel's block.
func mixPushOf(a *backend.Attention) mixPush {
	return mixPush{uint32(a.T), uint32(a.Keys()), uint32(a.Heads), uint32(a.KVHeads), uint32(a.HeadDim), uint32(a.Pos0)}
}

// scoresPushOf is a's geometry, scale, window and cap.
func scoresPushOf(a *backend.Attention) scoresPush {
	return scoresPush{mixPushOf(a), a.Scale, uint32(a.Window), a.Softcap}
}

func (s *stream) AttnScores(a *backend.Attention) {
	t := s.attention("attention scores", a, map[string]backend.Tensor{"Q": a.Q, "K": a.K, "Scores": a.Scores})
	if t == nil {
		return
	}
	kernel, specs := s.attnTile("scores")
	s.dispatch(kernel, specs, []use{t["Q"].reads(), t["K"].reads(), t["Scores"].writes()},
		pushWords(new(scoresPushOf(a))), ceilDiv(a.Keys(), tile), ceilDiv(a.T, tile), uint32(a.Heads))
}

func (s *stream) Softmax(dst, src backend.Tensor, rows, n int) {
	s.softmax(dst, src, softmaxPush{rows: uint32(rows), n: uint32(n)})
}

// causalSoftmax is Softmax of a's causally masked scores into its pattern,
// reading only each query's keys; the zeros around them are written unless
// held says the pattern has them from a prefill of the same layout.
func (s *stream) causalSoftmax(a *backend.Attention, held bool) {
	s.softmax(a.Pattern, a.Scores, softmaxPush{uint32(a.Heads * a.T), uint32(a.Keys()), uint32(a.T), uint32(a.Pos0), uint32(a.Window), b2u(held)})
}

// softmax dispatches softmax.comp over p.rows rows of p.n (p.t = 0: whole
// rows, else causally masked).
func (s *stream) softmax(dst, src backend.Tensor, p softmaxPush) {
	rows, n := int(p.rows), int(p.n)
	d, x := s.tensorOf(dst), s.tensorOf(src)
	if !s.fits("softmax", []*tensor{d, x}, rows*n, rows*n) {
		return
	}
	gx, gy, gz := gridRows(rows)
	kernel := "softmax"
	if s.tuning.subgroups(s.b.dev) {
		kernel += "_sg"
	}
	s.dispatch(kernel, []uint32{s.b.reduceWG}, []use{d.writes(), x.reads()},
		pushWords(&p), gx, gy, gz)
}

func (s *stream) AttnMix(a *backend.Attention) {
	t := s.attention("attention mix", a, map[string]backend.Tensor{"Pattern": a.Pattern, "V": a.V, "Z": a.Z})
	if t == nil {
		return
	}
	kernel, specs := s.attnTile("mix")
	s.dispatch(kernel, specs, []use{t["Pattern"].reads(), t["V"].reads(), t["Z"].writes()},
		pushWords(new(mixPushOf(a))), ceilDiv(a.HeadDim, tile), ceilDiv(a.T, tile), uint32(a.Heads))
}

// attnTile is the variant of scores.comp or mix.comp to run: on cooperative
// matrices where the device has them (tile_coop.glsl, at the stream's
// precision), else on the shader cores in float32.
func (s *stream) attnTile(kernel string) (string, []uint32) {
	if !s.tuning.coop(s.b.dev) {
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
	if !coopFlash(s.tuning, s.b.dev, s.precision != backend.PrecisionFast, a.HeadDim) {
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
	if limit := s.b.dev.sharedMem; a.HeadDim > maxHeadD || shared > limit {
		s.fail(fmt.Errorf("vulkan: flash attention over %d-dim heads needs %d bytes of shared memory (the device has %d) and at most %d dims; capture the pattern to use the materialised path", a.HeadDim, shared, limit, maxHeadD))
		return
	}
	// A workgroup takes rows of (query, head), its heads from one GQA group
	// so that they share each K/V tile.
	specs := []uint32{uint32(a.HeadDim), b2u(a.Window > 0), b2u(a.Softcap != 0)}
	uses := []use{t["Q"].reads(), t["K"].reads(), t["V"].reads(), t["Z"].writes()}
	exact := s.precision != backend.PrecisionFast
	plan := planFlash(s.tuning, s.b.dev, exact, a.T, a.HeadDim)
	rows, apart, kv16 := plan.rows, plan.apart, plan.halfKV
	wgHeads := flashHeads(a.Heads/a.KVHeads, rows)
	blocks := ceilDiv(a.T, rows/wgHeads) // query blocks: each reads K and V
	push := flashPush{scoresPushOf(a), uint32(wgHeads)}
	if !plan.coop {
		s.dispatch("flash", specs, uses, pushWords(&push), blocks, uint32(a.Heads/wgHeads), 1)
		return
	}
	kernel := "flash_coop"
	specs = append(specs, 2*uint32(rows), b2u(exact))
	// Unused bindings still need a buffer.
	scores, kh, vh := t["Q"].reads(), t["Q"].reads(), t["Q"].reads()
	if capture {
		kernel, scores = "flash_coop_capture", t["Scores"].writes()
	}
	var loBase, bigBase uint32
	if kv16 {
		kvd := a.KVHeads * a.HeadDim
		var kb, vb *buffer
		if kb, loBase, bigBase = s.toHalfIn(&s.halfK, t["K"], a.Keys(), a.Keys(), kvd, exact); kb == nil {
			return
		}
		if vb, _, _ = s.toHalfIn(&s.halfV, t["V"], a.Keys(), a.Keys(), kvd, exact); vb == nil {
			return
		}
		kh, vh = use{buf: kb}, use{buf: vb}
	}
	specs = append(specs, b2u(kv16), b2u(apart))
	uses = append(uses, scores, kh, vh)
	s.dispatch(kernel, specs, uses, pushWords(&flashCoopPush{push, b2u(tailsHeld), loBase, bigBase}), blocks, uint32(a.Heads/wgHeads), 1)
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
	s.dispatch("add", nil, []use{d.writes(), x.reads(), y.reads()}, pushWords(&elemPush{uint32(n)}), gx, gy, gz)
}

func (s *stream) SwiGLU(dst, gate, up backend.Tensor, n int) {
	d, g, u := s.tensorOf(dst), s.tensorOf(gate), s.tensorOf(up)
	if !s.fits("swiglu", []*tensor{d, g, u}, n, n, n) {
		return
	}
	gx, gy, gz := grid1(n, 256)
	s.dispatch("swiglu", nil, []use{d.writes(), g.reads(), u.reads()}, pushWords(&elemPush{uint32(n)}), gx, gy, gz)
}

func (s *stream) GELU(dst, src backend.Tensor, n int) {
	d, x := s.tensorOf(dst), s.tensorOf(src)
	if !s.fits("gelu", []*tensor{d, x}, n, n) {
		return
	}
	gx, gy, gz := grid1(n, 256)
	s.dispatch("gelu", nil, []use{d.writes(), x.reads()}, pushWords(&elemPush{uint32(n)}), gx, gy, gz)
}

func (s *stream) GeGLU(dst, gate, up backend.Tensor, n int) {
	d, g, u := s.tensorOf(dst), s.tensorOf(gate), s.tensorOf(up)
	if !s.fits("geglu", []*tensor{d, g, u}, n, n, n) {
		return
	}
	gx, gy, gz := grid1(n, 256)
	s.dispatch("geglu", nil, []use{d.writes(), g.reads(), u.reads()}, pushWords(&elemPush{uint32(n)}), gx, gy, gz)
}

func (s *stream) Softcap(x backend.Tensor, n int, cap float32) {
	d := s.tensorOf(x)
	if !s.fits("softcap", []*tensor{d}, n) {
		return
	}
	gx, gy, gz := grid1(n, 256)
	s.dispatch("softcap", nil, []use{d.writes()}, pushWords(&softcapPush{uint32(n), cap}), gx, gy, gz)
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
	if s.tuning.CopyShader && d.buf.mapped == nil && x.buf.mapped == nil && n > 0 {
		s.copyOnCores(d.buf, dstOff, x.buf, srcOff, n)
		return
	}
	s.copyBuffer(d.buf, 4*uint64(dstOff), x.buf, 4*uint64(srcOff), 4*uint64(n))
}

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
	s.dispatch("copy", nil, []use{du, su}, pushWords(&copyPush{uint32(n), d, sr, b2u(vec4s)}), gx, gy, gz)
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
			pushWords(&editMeanPush{uint32(e.Off), uint32(e.Rows), uint32(e.Cols), uint32(e.Stride)}), gx, gy, gz)
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
		pushWords(&editPush{uint32(e.Op), uint32(e.Off), uint32(e.Rows), uint32(e.Cols), uint32(e.Stride), e.Scalar, uint32(e.SrcOff), uint32(e.SrcStride)}),
		gx, gy, gz)
}

func (s *stream) Argmax(dst, src backend.Tensor, rows, n int) {
	d, x := s.tensorOf(dst), s.tensorOf(src)
	if !s.fits("argmax", []*tensor{d, x}, rows, rows*n) {
		return
	}
	gx, gy, gz := gridRows(rows)
	s.dispatch("argmax", []uint32{s.b.reduceWG}, []use{d.writes(), x.reads()},
		pushWords(&rowsPush{uint32(rows), uint32(n)}), gx, gy, gz)
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
		pushWords(&rankPush{uint32(rows), uint32(n), uint32(col)}), gx, gy, gz)
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
		pushWords(&rowNormPush{uint32(rows), uint32(n), uint32(off)}), gx, gy, gz)
}

// routeMaxK is the most experts route.comp chooses for a token (MAX_K).
const routeMaxK = 256

func (s *stream) Route(ids, weights, logits backend.Tensor, rows, experts, k int) {
	i, w, x := s.tensorOf(ids), s.tensorOf(weights), s.tensorOf(logits)
	if !s.fits("route", []*tensor{i, w, x}, rows*k, rows*k, rows*experts) {
		return
	}
	if k < 1 || k > experts || k > routeMaxK {
		s.fail(fmt.Errorf("vulkan: routing to %d of %d experts: want 1 to %d, and at most the experts", k, experts, routeMaxK))
		return
	}
	gx, gy, gz := grid1(rows, 1) // a workgroup a row
	s.dispatch("route", nil, []use{i.writes(), w.writes(), x.reads()},
		pushWords(&routePush{uint32(rows), uint32(experts), uint32(k)}), gx, gy, gz)
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
		pushWords(&gatherPush{n: uint32(len(rows)), cols: uint32(cols)}), gx, gy, gz)
}

func (s *stream) WeightedSum(dst, src, weights backend.Tensor, rows, k, cols int) {
	d, x, w := s.tensorOf(dst), s.tensorOf(src), s.tensorOf(weights)
	if !s.fits("weighted_sum", []*tensor{d, x, w}, rows*cols, rows*k*cols, rows*k) {
		return
	}
	gx, gy, gz := grid1(rows*cols, 256)
	s.dispatch("weighted_sum", nil, []use{d.writes(), x.reads(), w.reads()},
		pushWords(&weightedSumPush{uint32(rows), uint32(k), uint32(cols)}), gx, gy, gz)
}
