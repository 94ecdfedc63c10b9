package vulkan

import (
	"fmt"
	"math"
	"slices"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/vulkan/vk"
)

// SetTuning makes s choose its kernels by t.
func SetTuning(s backend.Stream, t Tuning) { s.(*stream).tuning = &t }

// Tune gives s a tuning of its own, its tuning so far, for the test to
// change between the kernels it records.
func Tune(s backend.Stream) *Tuning {
	st := s.(*stream)
	t := *st.tuning
	st.tuning = &t
	return &t
}

// Tuned is b with streams that choose their kernels by the tuning it
// returns (b's so far), which the test may change between runs; the
// weights are b's, so an engine on it runs as one on b but for the kernels.
func Tuned(b *Backend) (backend.Backend, *Tuning) {
	t := b.tuning
	return tuned{b, &t}, &t
}

type tuned struct {
	*Backend
	t *Tuning
}

func (b tuned) NewStream() backend.Stream {
	s := b.newStream()
	s.tuning = b.t
	return s
}

// Subgroups reports whether the device has subgroup arithmetic, for the
// kernels' subgroup variants.
func Subgroups(b *Backend) bool { return b.dev.subgroups }

// DeviceMemory returns how many buffers the backend holds and the bytes
// counted against its memory heaps.
func DeviceMemory(b *Backend) (buffers int, bytes uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range b.heapUsed {
		bytes += n
	}
	return len(b.buffers), bytes
}

// HeapSize is the size of the memory heap device-local buffers come from.
func HeapSize(b *Backend) uint64 {
	typ, _ := b.phys.memoryType(^uint32(0), 0, vk.MemoryPropertyDeviceLocalBit, 0)
	return uint64(b.phys.memory.MemoryHeaps[b.phys.memory.MemoryTypes[typ].HeapIndex].Size)
}

// coopTiles are the shapes the cooperative GEMM is tested and timed with,
// among them those coopTileFor picks.
func coopTiles() []coopTile {
	return []coopTile{
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
}

// CoopTiles names the cooperative GEMM's tile shapes, for tests to force.
func CoopTiles() []string {
	var names []string
	for _, t := range coopTiles() {
		names = append(names, t.String())
	}
	return names
}

// ForceCoopTile makes every cooperative GEMM chosen by t use CoopTiles()[i]
// (-1: the usual choice). It reports false where the tile needs more
// shared memory than b's device has, at exact precision or not, with
// weights split in hi + lo halves or not.
func ForceCoopTile(b *Backend, t *Tuning, i int, exact, splitW bool) bool {
	if i < 0 {
		t.coopTile = nil
		return true
	}
	c := coopTiles()[i]
	if c.shared(exact, splitW) > b.dev.sharedMem {
		return false
	}
	t.coopTile = &c
	return true
}

// CoopTileIndex4x2 is the index in CoopTiles of the 128 x 128 tile of 4 x 2
// accumulators per subgroup that loads late or not; -1 if there is none.
func CoopTileIndex4x2(late bool) int {
	return slices.Index(coopTiles(), coopTile{tm: 4, tn: 2, wgm: 2, bk: 32, late: late})
}

// Coop reports whether the device was opened with cooperative-matrix GEMMs.
func Coop(b *Backend) bool { return b.coopEnabled }

// PlannedLimits is the shared memory and subgroup size kernel choice
// takes the device to have.
func PlannedLimits(b *Backend) (int, uint32) { return b.dev.sharedMem, b.dev.subgroupSize }

// MaxStorageBuffer is the largest storage buffer the device binds.
func MaxStorageBuffer(b *Backend) uint64 { return uint64(b.phys.props.Limits.MaxStorageBufferRange) }

// HalfWRowsAll sets t's fewest rows of x for which a cooperative GEMM's
// weights are decoded to float16 first to n, at both precisions and for
// weights of any size.
func HalfWRowsAll(t *Tuning, n int) {
	t.HalfWRows = HalfWRows{Fast: n, FastCodes: n, Exact: n, SmallExact: n, FastCoop2: n}
}

// WeightsToHalf records weights16.comp for w into dst (a tensor of at least
// Rows*Cols/2 + Rows elements): the float16 weights, then a range flag per row.
func WeightsToHalf(s backend.Stream, w backend.Matrix, dst backend.Tensor) {
	st, m := s.(*stream), w.(*matrix)
	halves := 2 * uint64(m.w.Rows) * uint64(m.w.Cols)
	st.weightsToHalf(m, st.tensorOf(dst).buf, halfRange{bigBase: uint32(halves / 4), hi: halves + 4*uint64(m.w.Rows)})
}

// planOne is s's plan for a product of rows of x by w alone.
func planOne(s backend.Stream, rows int, w backend.Matrix) projPlan {
	st := s.(*stream)
	p := planMatMul(st.tuning, st.b.dev, st.precision != backend.PrecisionFast, rows, w.Cols(), []weightShape{shapeOf(w.(*matrix))})
	return p.projs[0]
}

// TakesCoop reports whether s would multiply rows of x by w on cooperative
// matrices, at its precision.
func TakesCoop(s backend.Stream, rows int, w backend.Matrix) bool {
	return planOne(s, rows, w).kernel == gemmCoop
}

// SplitBelowAll makes t split cooperative products of fewer than n
// workgroups along K, whatever their tile and however many the call's
// products have together.
func SplitBelowAll(t *Tuning, n int) {
	t.SplitBelow, t.SplitBelowLate, t.SplitBelowExact, t.SplitTotal = n, n, n, math.MaxInt
}

// SumParts records splitk.comp: dst (rows x cols) is the sum of the parts
// products in part, stride elements apart, plus bias (when not nil).
func SumParts(s backend.Stream, part, dst, bias backend.Tensor, rows, cols, parts, stride int) {
	st := s.(*stream)
	b, has := st.tensorOf(dst), uint32(0)
	if bias != nil {
		b, has = st.tensorOf(bias), 1
	}
	st.sumParts(use{buf: st.tensorOf(part).buf}, st.tensorOf(dst), b, has, rows, cols, parts, stride)
}

// SplitParts is how many parts along K the stream would split a product of
// rows of x by w into (1: not split).
func SplitParts(s backend.Stream, rows int, w backend.Matrix) int {
	return max(1, planOne(s, rows, w).split.parts)
}

// HalvesFirst reports whether a product of rows of x by w on s takes w in
// float16 from a buffer (made first by weights16.comp, or F16 as it is).
func HalvesFirst(s backend.Stream, rows int, w backend.Matrix) bool {
	return planOne(s, rows, w).half.ok
}

// FlashCoopRows sets the rows of t's flash_coop.comp workgroups for any T,
// 64 or 128, and with 128 whether K and V are staged in turn even where
// both fit.
func FlashCoopRows(t *Tuning, n int, apart bool) {
	t.FlashWideFrom, t.flashApart = alwaysOrNever(n == 128), apart
}

// FlashHalfKV sets whether t's flash_coop.comp reads K and V converted to
// float16 once, for any T.
func FlashHalfKV(t *Tuning, on bool) { t.FlashHalfKVFrom = alwaysOrNever(on) }

// alwaysOrNever is a threshold of T that every prompt passes, or none.
func alwaysOrNever(always bool) int {
	if always {
		return 0
	}
	return 1 << 30
}

// FlashLayout is what flash attention a takes on s: flash_coop.comp's rows
// (0: flash.comp), whether it stages K and V in turn, and whether it reads
// them converted to float16 once.
func FlashLayout(s backend.Stream, a *backend.Attention) (rows int, apart, halves bool) {
	st := s.(*stream)
	p := planFlash(st.tuning, st.b.dev, st.precision != backend.PrecisionFast, a.T, a.HeadDim)
	if !p.coop {
		return 0, false, false
	}
	return p.rows, p.apart, p.halfKV
}

// FlashApartNeeded reports whether 128-row flash_coop.comp workgroups
// must stage K and V in turn on b at a precision: both do not fit its
// shared memory.
func FlashApartNeeded(b backend.Backend, exact bool) bool {
	return flashCoopShared(exact, 128, false) > int(b.(*Backend).phys.props.Limits.MaxComputeSharedMemorySize)
}

// CausalSoftmax makes a's pattern of its scores as FlashAttentionCapture does.
func CausalSoftmax(s backend.Stream, a *backend.Attention, held bool) {
	s.(*stream).causalSoftmax(a, held)
}

func masksOf(a *backend.Attention, pattern bool) maskLayout {
	return maskLayout{heads: a.Heads, t: a.T, pos0: a.Pos0, keys: a.Keys(), window: a.Window, pattern: pattern}
}

// MasksHeld reports whether FlashAttentionCapture would take t's masked
// entries of a's layout as written.
func MasksHeld(t backend.Tensor, a *backend.Attention, pattern bool) bool {
	return t.(*tensor).masksHeld(masksOf(a, pattern))
}

// OnMasksKept has f called for each capture whose masked scores were not
// written again (nil: no longer).
func OnMasksKept(b *Backend, f func()) {
	if f == nil {
		b.onMasksKept.Store(nil)
		return
	}
	b.onMasksKept.Store(&f)
}

// MarkMasks records t's masked entries of a's layout as written, whatever t holds.
func MarkMasks(t backend.Tensor, a *backend.Attention, pattern bool) {
	t.(*tensor).masksWritten(masksOf(a, pattern))
}

// StageOf is the stage a kernel's time is reported under.
func StageOf(kernel string) string { return stageOf(kernel) }

// NormKernel is the kernel RMSNorm takes on s for rows of dim elements and
// the rows a workgroup of it takes.
func NormKernel(s backend.Stream, dim int) (string, int) {
	st := s.(*stream)
	return normKernel(st.tuning, st.b.dev, dim)
}

// SetRowsFactor multiplies the rows a workgroup of rmsnorm_sg or matvec_sg
// takes under t, so that its subgroups loop over more rows than they are.
func SetRowsFactor(t *Tuning, f int) { t.rowsFactor = f }

// TakesCoop2 reports whether s would multiply rows of x by w on
// workgroup-scope cooperative matrices (matmul_coop2.comp), at its precision.
func TakesCoop2(s backend.Stream, rows int, w backend.Matrix) bool {
	return planOne(s, rows, w).kernel == gemmCoop2
}

// ForceCoop2Tile makes t's matmul_coop2.comp products take bn rows of W by
// bm of x, bk along K a step, by tensor loads or through shared memory.
func ForceCoop2Tile(t *Tuning, bn, bm, bk int, tensor bool) {
	t.coop2Tile = &coop2Tile{bn: bn, bm: bm, bk: bk, tensor: tensor}
}

// Coop2Tensor reports whether the device loads workgroup-scope matrices by
// tensor loads.
func Coop2Tensor(b *Backend) bool { return b.dev.coop2.tensor }

// Coop2Caps describes the device's workgroup-scope matrices as kernel
// choice sees them.
func Coop2Caps(b *Backend) string {
	return fmt.Sprintf("workgroup-scope cooperative matrices: granularity (M, N, K) %v, dimensions up to %d, tensor loads %v",
		b.dev.coop2.gran, b.dev.coop2.maxDim, b.dev.coop2.tensor)
}
