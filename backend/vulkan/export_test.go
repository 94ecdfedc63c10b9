package vulkan

import (
	"math"
	"slices"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/vulkan/vk"
)

// SetSubgroups turns the subgroup kernel variants off or back on (where the
// device has them), so tests run the portable ones too; it returns the
// previous setting.
func SetSubgroups(b *Backend, on bool) bool {
	old := b.subgroups
	b.subgroups = on && b.phys.subgroupArithmetic()
	return old
}

// Subgroups reports whether kernels take their subgroup variants.
func Subgroups(b *Backend) bool { return b.subgroups }

// SetStagingCap changes how much host data one submission may stage and
// returns the previous bound.
func SetStagingCap(n uint64) uint64 {
	old := stagingCap
	stagingCap = n
	return old
}

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

// SetCoop turns the cooperative-matrix GEMMs off or back on (where the
// device was opened with them); it returns the previous setting.
func SetCoop(b *Backend, on bool) bool {
	old := b.coop
	b.coop = on && b.coopEnabled
	return old
}

// CoopTiles names the cooperative GEMM's tile shapes, for tests to force.
func CoopTiles() []string {
	names := make([]string, len(coopTiles))
	for i, t := range coopTiles {
		names[i] = t.String()
	}
	return names
}

// ForceCoopTile makes every cooperative GEMM of the device use coopTiles[i]
// (-1: the usual choice). It reports false where the tile needs more shared
// memory than the device has, at exact precision or not, with weights split
// in hi + lo halves or not.
func ForceCoopTile(b *Backend, i int, exact, splitW bool) bool {
	if i < 0 {
		forcedCoopTile = nil
		return true
	}
	t := coopTiles[i]
	if t.shared(exact, splitW) > int(b.phys.props.Limits.MaxComputeSharedMemorySize) {
		return false
	}
	forcedCoopTile = &t
	return true
}

// CoopTileIndex4x2 is the index in CoopTiles of the 128 x 128 tile of 4 x 2
// accumulators per subgroup that loads late or not; -1 if there is none.
func CoopTileIndex4x2(late bool) int {
	return slices.Index(coopTiles, coopTile{tm: 4, tn: 2, wgm: 2, bk: 32, late: late})
}

// Coop reports whether the device was opened with cooperative-matrix GEMMs.
func Coop(b *Backend) bool { return b.coopEnabled }

// MaxStorageBuffer is the largest storage buffer the device binds.
func MaxStorageBuffer(b *Backend) uint64 { return uint64(b.phys.props.Limits.MaxStorageBufferRange) }

// SetReadChunk changes the size of the buffers reads pass through and
// returns the previous size.
func SetReadChunk(n uint64) uint64 { return swap(&readChunk, n) }

// SetCoopHalfX turns the one-pass float16 conversion of a cooperative
// GEMM's x on or off and returns the previous setting.
func SetCoopHalfX(on bool) bool { return swap(&coopHalfX, on) }

// SetCoopHalfWRows sets, at both precisions and for weights of any size,
// the fewest rows of x for which a cooperative GEMM's weights are decoded
// to float16 first; restore sets the values before.
func SetCoopHalfWRows(n int) (restore func()) {
	old := coopHalfWRows
	coopHalfWRows = halfWRows{fast: n, exact: n, smallExact: n}
	return func() { coopHalfWRows = old }
}

// WeightsToHalf records weights16.comp for w into dst (a tensor of at least
// Rows*Cols/2 + Rows elements): the float16 weights, then a range flag per row.
func WeightsToHalf(s backend.Stream, w backend.Matrix, dst backend.Tensor) {
	st, m := s.(*stream), w.(*matrix)
	halves := 2 * uint64(m.w.Rows) * uint64(m.w.Cols)
	st.weightsToHalf(m, st.tensorOf(dst).buf, halfRange{bigBase: uint32(halves / 4), hi: halves + 4*uint64(m.w.Rows)})
}

// TakesCoop reports whether s would multiply rows of x by w on cooperative
// matrices, at its precision.
func TakesCoop(s backend.Stream, rows int, w backend.Matrix) bool {
	st := s.(*stream)
	var hw halfRange
	if ranges, _ := st.planHalfWeights(rows, w.Cols(), []backend.Proj{{W: w}}); ranges != nil {
		hw = ranges[0]
	}
	return st.takesCoop(rows, w.(*matrix), hw)
}

// SetCoopExactInTileElems sets the fewest elements of weights not exact in
// float16 that exact cooperative products split in their tiles when not
// first (math.MaxInt: none, the portable kernel takes them); restore sets
// the value before.
func SetCoopExactInTileElems(n int) (restore func()) {
	old := swap(&coopExactInTileElems, n)
	return func() { coopExactInTileElems = old }
}

// SetCoopSplitK turns splitting cooperative products along K on or off,
// returning the old setting.
func SetCoopSplitK(on bool) bool { return swap(&coopSplitK, on) }

// SetCoopSplitBelow splits cooperative products of fewer than n workgroups
// along K, whatever their tile and however many the call's products have
// together, and returns a function that restores the usual thresholds.
func SetCoopSplitBelow(n int) func() {
	old, oldLate, oldExact, oldTotal := swap(&coopSplitBelow, n), swap(&coopSplitBelowLate, n), swap(&coopSplitBelowExact, n), swap(&coopSplitTotal, math.MaxInt)
	return func() {
		coopSplitBelow, coopSplitBelowLate, coopSplitBelowExact, coopSplitTotal = old, oldLate, oldExact, oldTotal
	}
}

// SumParts records splitk.comp: dst (rows x cols) is the sum of the parts
// products in part, plus bias (when not nil).
func SumParts(s backend.Stream, part, dst, bias backend.Tensor, rows, cols, parts int) {
	st := s.(*stream)
	b, has := st.tensorOf(dst), uint32(0)
	if bias != nil {
		b, has = st.tensorOf(bias), 1
	}
	st.sumParts(use{buf: st.tensorOf(part).buf}, st.tensorOf(dst), b, has, rows, cols, parts)
}

// SplitParts is how many parts along K the stream would split a product of
// rows of x by w into (1: not split).
func SplitParts(s backend.Stream, rows int, w backend.Matrix) int {
	st := s.(*stream)
	outs := []backend.Proj{{W: w}}
	halfW, _ := st.planHalfWeights(rows, w.Cols(), outs)
	plans := st.splitPlans(rows, w.Cols(), outs, halfW)
	if plans == nil {
		return 1
	}
	return max(1, plans[0].parts)
}

// HalvesFirst reports whether a product of rows of x by w on s takes w in
// float16 from a buffer (made first by weights16.comp, or F16 as it is).
func HalvesFirst(s backend.Stream, rows int, w backend.Matrix) bool {
	ranges, _ := s.(*stream).planHalfWeights(rows, w.Cols(), []backend.Proj{{W: w}})
	return ranges != nil && ranges[0].ok
}

// SetFlashCoopRows sets the rows of a flash_coop.comp workgroup for any T,
// 64 or 128, and with 128 whether K and V are staged in turn even where
// both fit; it returns a function restoring the rules.
func SetFlashCoopRows(n int, apart bool) func() {
	oldFrom, oldApart := swap(&flashWideFrom, alwaysOrNever(n == 128)), swap(&flashApart, apart)
	return func() { flashWideFrom, flashApart = oldFrom, oldApart }
}

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
	if st := s.(*stream); st.coopFlash(a.HeadDim) {
		return st.flashLayout(a)
	}
	return 0, false, false
}

// FlashApartNeeded reports whether 128-row flash_coop.comp workgroups
// must stage K and V in turn on b at a precision: both do not fit its
// shared memory.
func FlashApartNeeded(b backend.Backend, exact bool) bool {
	return flashCoopShared(exact, 128, false) > int(b.(*Backend).phys.props.Limits.MaxComputeSharedMemorySize)
}

// SetFlashHalfKV sets whether flash_coop.comp reads K and V converted to
// float16 once, for any T; it returns a function restoring the rule.
func SetFlashHalfKV(on bool) func() {
	old := swap(&flashHalfKVFrom, alwaysOrNever(on))
	return func() { flashHalfKVFrom = old }
}

// SetCopyShader chooses copy.comp (true) or the copy command for copies
// between device tensors, returning the old choice.
func SetCopyShader(on bool) bool { return swap(&copyShader, on) }

// swap sets *p to v and returns what it was.
func swap[T any](p *T, v T) T {
	old := *p
	*p = v
	return old
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

// NormKernel is the kernel RMSNorm takes for rows of dim elements and the
// rows a workgroup of it takes.
func NormKernel(b *Backend, dim int) (string, int) { return b.normKernel(dim) }

// SetRowsFactor multiplies the rows a workgroup of rmsnorm_sg or matvec_sg
// takes and
// returns the factor before.
func SetRowsFactor(f int) int {
	old := rowsFactor
	rowsFactor = f
	return old
}
