package vulkan

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Devices as kernel choice sees them: an H200 (227 KiB of shared memory,
// subgroups of 32), a GPU of 48 KiB, one of 16 KiB, and lavapipe (no
// cooperative matrices).
var (
	h200     = devCaps{coop: true, subgroups: true, subgroupSize: 32, sharedMem: 227 << 10, wideGroups: true, reduceWG: 256}
	gpu48    = devCaps{coop: true, subgroups: true, subgroupSize: 32, sharedMem: 48 << 10, wideGroups: true, reduceWG: 256}
	gpu16    = devCaps{coop: true, subgroups: true, subgroupSize: 32, sharedMem: 16 << 10, wideGroups: true, reduceWG: 256}
	lavapipe = devCaps{subgroups: true, subgroupSize: 8, sharedMem: 32 << 10, wideGroups: true, reduceWG: 256}
)

// Weights of bonsai-8b's shape and a small expert's, in a format exact in
// float16 (Q1_0_g128), one that is not (Q4_K), and F16.
var (
	q1Big  = weightShape{rows: 4096, cols: 4096, exactInHalf: true}
	q4Big  = weightShape{rows: 4096, cols: 4096, codes: true}
	q6Big  = weightShape{rows: 4096, cols: 4096}
	q4Head = weightShape{rows: 151936, cols: 2048}
	q4Tiny = weightShape{rows: 256, cols: 256}
	f16Big = weightShape{rows: 4096, cols: 4096, f16: true, exactInHalf: true}
)

var (
	lateTile  = coopTile{tm: 4, tn: 2, wgm: 2, bk: 32, late: true}
	exactTile = coopTile{tm: 4, tn: 2, wgm: 2, bk: 32}
	splitTile = coopTile{tm: 2, tn: 4, wgm: 4, bk: 32}
	halfTile  = coopTile{tm: 2, tn: 4, wgm: 4, bk: 64}
)

// Each product's kernel, tile, weights in float16 first and split along K,
// by the default tuning: the rules docs/PERFORMANCE.md measured.
func TestPlanMatMulRoutesEachProduct(t *testing.T) {
	def := DefaultTuning()
	portable := DefaultTuning()
	portable.Coop = false
	noSplit := DefaultTuning()
	noSplit.SplitK = false
	noSubgroups := DefaultTuning()
	noSubgroups.Subgroups = false
	for _, c := range []struct {
		name        string
		t           Tuning
		d           devCaps
		exact       bool
		rows        int
		w           weightShape
		kernel      gemmKernel
		tile        coopTile
		halvesFirst bool
		parts       int
	}{
		// Fast: 128 x 128 tiles; halves first from 128 rows (Q4_K's codes:
		// from 512), else the late tile.
		{"fast Q4_K T=512", def, h200, false, 512, q4Big, gemmCoop, halfTile, true, 1},
		{"fast Q4_K T=128", def, h200, false, 128, q4Big, gemmCoop, lateTile, false, 8},
		{"fast Q4_K T=64", def, h200, false, 64, q4Big, gemmCoop, lateTile, false, 8},
		{"fast Q6_K T=128", def, h200, false, 128, q6Big, gemmCoop, halfTile, true, 8},
		{"fast Q1_0 T=512", def, h200, false, 512, q1Big, gemmCoop, lateTile, false, 2},
		{"fast Q1_0 T=2048", def, h200, false, 2048, q1Big, gemmCoop, lateTile, false, 1},
		{"fast F16 read as it is", def, h200, false, 16, f16Big, gemmCoop, halfTile, true, 8},
		// Exact: halves first from 9 rows for large weights, from 128 for small.
		{"exact Q4_K T=64", def, h200, true, 64, q4Big, gemmCoop, splitTile, true, 8},
		{"exact Q4_K T=512", def, h200, true, 512, q4Big, gemmCoop, splitTile, true, 1},
		{"exact Q1_0 T=128", def, h200, true, 128, q1Big, gemmCoop, exactTile, false, 8},
		{"exact Q1_0 T=512", def, h200, true, 512, q1Big, gemmCoop, exactTile, false, 1},
		{"exact small Q4_K T=64", def, h200, true, 64, q4Tiny, gemmTiled, coopTile{}, false, 1},
		{"exact small Q4_K T=128", def, h200, true, 128, q4Tiny, gemmCoop, splitTile, true, 1},
		// An LM head past the float16 weights' cap splits in the tiles.
		{"exact head T=64", def, h200, true, 64, q4Head, gemmCoop, exactTile, false, 1},
		// Too little shared memory for the halves: the portable kernel at
		// exact precision, the small tile at fast.
		{"exact Q4_K on 16 KiB", def, gpu16, true, 64, q4Big, gemmTiled, coopTile{}, false, 1},
		{"fast Q4_K on 16 KiB", def, gpu16, false, 512, q4Big, gemmCoop, smallCoopTile(), true, 1},
		{"exact Q4_K on 48 KiB", def, gpu48, true, 64, q4Big, gemmCoop, splitTile, true, 8},
		// Eight rows or fewer: matvec, on subgroups where there are some.
		{"matvec on subgroups", def, h200, true, 8, q4Big, gemmMatvecSubgroup, coopTile{}, false, 1},
		{"matvec without subgroups", noSubgroups, h200, true, 8, q4Big, gemmMatvec, coopTile{}, false, 1},
		// Without cooperative matrices: the portable GEMM.
		{"lavapipe", def, lavapipe, false, 512, q4Big, gemmTiled, coopTile{}, false, 1},
		{"Coop off", portable, h200, false, 512, q4Big, gemmTiled, coopTile{}, false, 1},
		{"SplitK off", noSplit, h200, false, 64, q4Big, gemmCoop, lateTile, false, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := planMatMul(&c.t, c.d, c.exact, c.rows, c.w.cols, []weightShape{c.w})
			pp := p.projs[0]
			require.Equal(t, c.kernel, pp.kernel, "kernel")
			require.Equal(t, c.tile, pp.tile, "tile")
			require.Equal(t, c.halvesFirst, pp.half.ok, "weights in float16 first")
			require.Equal(t, c.parts, max(1, pp.split.parts), "parts along K")
			require.Equal(t, pp.kernel == gemmCoop && c.w.cols%8 == 0, p.halfX, "x in float16 first")
			if pp.split.parts > 1 {
				require.Zero(t, pp.split.chunk%pp.tile.bk, "whole k steps")
				require.GreaterOrEqual(t, pp.split.parts*pp.split.chunk, c.w.cols, "the parts cover K")
				require.Equal(t, 4*uint64(pp.split.parts*c.rows*c.w.rows), p.parts, "the parts' buffer")
			}
			if pp.half.ok && !pp.half.direct {
				halves := 2 * uint64(c.w.rows*c.w.cols)
				if c.exact {
					halves *= 2 // hi + lo
				}
				require.Equal(t, halves+4*uint64(c.w.rows), p.halfWBytes, "the float16 weights' buffer")
			}
		})
	}
}

// The products of one call run together: Q, K and V of 4096 x 4096 on the
// late tile at T=512 fill the device together (384 workgroups), so none is
// split, though each alone would be.
func TestPlanMatMulSplitsByTheCallsWorkgroups(t *testing.T) {
	def := DefaultTuning()
	alone := planMatMul(&def, h200, false, 512, 4096, []weightShape{q1Big})
	require.Equal(t, 2, alone.projs[0].split.parts)
	qkv := planMatMul(&def, h200, false, 512, 4096, []weightShape{q1Big, q1Big, q1Big})
	for i, p := range qkv.projs {
		require.Equal(t, 0, p.split.parts, "projection %d", i)
	}
	require.Zero(t, qkv.parts)
	// Ranges of the float16 weights of several projections do not overlap.
	three := planMatMul(&def, h200, true, 64, 4096, []weightShape{q4Big, q4Big, q4Big})
	for i := 1; i < 3; i++ {
		require.Equal(t, three.projs[i-1].half.hi, three.projs[i].half.lo)
		require.Zero(t, three.projs[i].half.lo%16, "16-byte aligned")
	}
}

// Which exact products take cooperative matrices: weights exact in
// float16, or split in hi + lo halves first, or, where their halves were
// not made first, split in the tiles from 2^21 elements (where shared
// memory holds the split tile); smaller weights keep the portable kernel.
func TestExactProductsTakeCooperativeMatricesWhereTheyPaid(t *testing.T) {
	def := DefaultTuning()
	for _, c := range []struct {
		exact, exactInHalf, first bool
		d                         devCaps
		elems                     int
		want                      bool
	}{
		{false, false, false, gpu16, 256 * 256, true},
		{true, true, false, gpu16, 256 * 256, true},
		{true, false, true, h200, 256 * 256, true},
		{true, false, false, h200, 4096 * 4096, true},
		{true, false, false, h200, coopHalfWSmallElems, true},
		{true, false, false, h200, coopHalfWSmallElems - 1, false},
		{true, false, false, gpu16, 4096 * 4096, false},
	} {
		w := weightShape{rows: c.elems / 256, cols: 256, exactInHalf: c.exactInHalf}
		require.Equal(t, c.want, takesCoop(&def, c.d, c.exact, 64, w, c.first), "%+v", c)
	}
}

// Flash attention: on cooperative matrices for heads of whole 16-dim
// tiles up to 128; from 1024 queries on, K and V in float16 once and
// 128-row workgroups, staging K and V in turn where both do not fit.
func TestPlanFlashRoutesByLengthAndDevice(t *testing.T) {
	def := DefaultTuning()
	portable := DefaultTuning()
	portable.Coop = false
	for _, c := range []struct {
		name         string
		t            Tuning
		d            devCaps
		exact        bool
		queries, dim int
		want         flashPlan
	}{
		{"short", def, h200, false, 256, 128, flashPlan{coop: true, rows: 64}},
		{"long fast", def, h200, false, 2048, 128, flashPlan{coop: true, rows: 128, halfKV: true}},
		{"long exact", def, h200, true, 2048, 128, flashPlan{coop: true, rows: 128, halfKV: true}},
		{"long exact on 48 KiB", def, gpu48, true, 2048, 128, flashPlan{coop: true, rows: 128, apart: true, halfKV: true}},
		{"long fast on 48 KiB", def, gpu48, false, 2048, 128, flashPlan{coop: true, rows: 128, halfKV: true}},
		{"72-dim heads", def, h200, false, 2048, 72, flashPlan{rows: flashRows}},
		{"256-dim heads", def, h200, false, 2048, 256, flashPlan{rows: flashRows}},
		{"on 16 KiB", def, gpu16, false, 2048, 128, flashPlan{rows: flashRows}},
		{"lavapipe", def, lavapipe, false, 2048, 64, flashPlan{rows: flashRows}},
		{"Coop off", portable, h200, false, 2048, 128, flashPlan{rows: flashRows}},
	} {
		require.Equal(t, c.want, planFlash(&c.t, c.d, c.exact, c.queries, c.dim), c.name)
	}
}

// RMSNorm gives a head's rows (up to 256 wide) a subgroup each, a model's
// rows a workgroup.
func TestNormKernelBySize(t *testing.T) {
	def := DefaultTuning()
	noSubgroups := DefaultTuning()
	noSubgroups.Subgroups = false
	looping := DefaultTuning()
	looping.rowsFactor = 3
	for _, c := range []struct {
		t      Tuning
		d      devCaps
		dim    int
		kernel string
		rows   int
	}{
		{def, h200, 128, "rmsnorm_sg", 8},
		{def, lavapipe, 128, "rmsnorm_sg", 32},
		{def, h200, 4096, "rmsnorm", 1},
		{noSubgroups, h200, 128, "rmsnorm", 1},
		{looping, h200, 128, "rmsnorm_sg", 24},
	} {
		kernel, rows := normKernel(&c.t, c.d, c.dim)
		require.Equal(t, c.kernel, kernel, "%+v", c)
		require.Equal(t, c.rows, rows, "%+v", c)
	}
}

// A tuning that would stall a stream is refused when the backend opens.
func TestTuningCheck(t *testing.T) {
	def := DefaultTuning()
	require.NoError(t, def.check())
	for _, bad := range []func(*Tuning){
		func(t *Tuning) { t.StagingBytes = 0 },
		func(t *Tuning) { t.ReadBytes = 0 },
		func(t *Tuning) { t.ReadBytes = 100 },
		func(t *Tuning) { t.SplitBelow = -1 },
		func(t *Tuning) { t.Coop2MinGroupsTensor = 0 },
	} {
		tu := DefaultTuning()
		bad(&tu)
		require.Error(t, tu.check())
	}
}

// Which products take matmul_coop2.comp on a device opened with
// workgroup-scope matrices (the granularity llama.cpp asks of a device of
// 256 invocations): float16 weights (F16, or made first, split in hi + lo
// at exact precision), no bias, whole tiles along W's rows and K, at least
// a tile of rows and Coop2MinGroups workgroups; the tile of 256 rows of x
// from 2048 rows at fast precision; tensor loads where the device has them, which take no
// shared memory of the kernel's own, from Coop2MinGroupsTensor workgroups; weights exact in
// float16 decoded first for them only, at fast precision from 512 rows.
func TestPlanMatMulTakesCoop2(t *testing.T) {
	def := DefaultTuning()
	off := DefaultTuning()
	off.Coop2 = false
	big := DefaultTuning()
	big.coop2Tile = &coop2Tile{bn: 128, bm: 256, bk: 64} // 54 KiB with x's and W's lo halves
	h200wg := h200
	h200wg.coop2 = coop2Caps{gran: [3]int{32, 32, 16}, maxDim: 256}
	wg48 := h200wg
	wg48.sharedMem = 48 << 10
	tensor48 := wg48
	tensor48.coop2.tensor = true
	coarse := h200wg
	coarse.coop2.gran = [3]int{256, 256, 16}
	gate := weightShape{rows: 12288, cols: 4096, codes: true}
	f16Gate := weightShape{rows: 12288, cols: 4096, f16: true, exactInHalf: true}
	q8Gate := weightShape{rows: 12288, cols: 4096}
	q1Gate := weightShape{rows: 12288, cols: 4096, exactInHalf: true}
	biased := q8Gate
	biased.bias = true
	ragged := weightShape{rows: 12288 + 64, cols: 4096}
	shortK := weightShape{rows: 12288, cols: 4096 + 16}
	for _, c := range []struct {
		name  string
		t     Tuning
		d     devCaps
		exact bool
		rows  int
		w     weightShape
		want  bool
		tile  coop2Tile
		split bool // W in hi + lo halves
	}{
		{"fast F16 T=512", def, h200wg, false, 512, f16Gate, true, coop2Tile{128, 128, 64, false}, false},
		{"fast F16 T=2048", def, h200wg, false, 2048, f16Gate, true, coop2Tile{128, 256, 64, false}, false},
		{"fast F16 T=2048, 48 KiB of shared memory", def, wg48, false, 2048, f16Gate, true, coop2Tile{128, 256, 32, false}, false},
		{"exact F16 T=2048", def, h200wg, true, 2048, f16Gate, true, coop2Tile{128, 128, 64, false}, false},
		{"exact F16 T=2048, 48 KiB of shared memory", def, wg48, true, 2048, f16Gate, true, coop2Tile{128, 128, 32, false}, false},
		{"fast Q4_K T=512, halves first", def, h200wg, false, 512, gate, true, coop2Tile{128, 128, 64, false}, false},
		{"exact Q8_0 T=256, halves split", def, h200wg, true, 256, q8Gate, true, coop2Tile{128, 128, 64, false}, true},
		{"exact Q8_0 T=256, 48 KiB of shared memory", def, wg48, true, 256, q8Gate, true, coop2Tile{128, 128, 32, false}, true},
		{"fast F16 T=2048, tensor loads", def, tensor48, false, 2048, f16Gate, true, coop2Tile{128, 256, 64, true}, false},
		{"exact Q8_0 T=256, tensor loads", def, tensor48, true, 256, q8Gate, true, coop2Tile{128, 128, 64, true}, true},
		{"fast Q8_0 T=128, tensor loads: 96 workgroups", def, tensor48, false, 128, q8Gate, true, coop2Tile{128, 128, 64, true}, false},
		{"fast Q8_0 T=128, tensor loads: 32 workgroups", def, tensor48, false, 128, weightShape{rows: 4096, cols: 4096}, false, coop2Tile{}, false},
		{"fast Q8_0 T=256, tensor loads: 64 workgroups", def, tensor48, false, 256, weightShape{rows: 4096, cols: 4096}, true, coop2Tile{128, 128, 64, true}, false},
		{"fast F16 T=512, tensor loads", def, tensor48, false, 512, f16Gate, true, coop2Tile{128, 128, 64, true}, false},
		{"fast Q1_0_g128 T=512, tensor loads: decoded first", def, tensor48, false, 512, q1Gate, true, coop2Tile{128, 128, 64, true}, false},
		{"fast Q1_0_g128 T=512, tensor loads, 32 workgroups: decoded in the tiles", def, tensor48, false, 512, weightShape{rows: 1024, cols: 4096, exactInHalf: true}, false, coop2Tile{}, false},
		{"fast Q1_0_g128 T=256, tensor loads: decoded in the tiles", def, tensor48, false, 256, q1Gate, false, coop2Tile{}, false},
		{"fast Q1_0_g128 T=2048, staged: decoded in the tiles", def, h200wg, false, 2048, q1Gate, false, coop2Tile{}, false},
		{"exact Q1_0_g128 T=2048, tensor loads: decoded in the tiles", def, tensor48, true, 2048, q1Gate, false, coop2Tile{}, false},
		{"a tile past shared memory", big, wg48, true, 512, q8Gate, false, coop2Tile{}, false},
		{"fast Q4_K T=256: decoded in the tiles", def, h200wg, false, 256, gate, false, coop2Tile{}, false},
		{"fast Q8_0 T=128: 96 workgroups", def, h200wg, false, 128, q8Gate, false, coop2Tile{}, false},
		{"with a bias", def, h200wg, false, 512, biased, false, coop2Tile{}, false},
		{"W's rows off the tile", def, h200wg, false, 512, ragged, false, coop2Tile{}, false},
		{"K off the tile", def, h200wg, false, 512, shortK, false, coop2Tile{}, false},
		{"a granularity the tile misses", def, coarse, false, 512, q8Gate, false, coop2Tile{}, false},
		{"opened without them", def, h200, false, 512, q8Gate, false, coop2Tile{}, false},
		{"Coop2 off", off, h200wg, false, 512, q8Gate, false, coop2Tile{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := planMatMul(&c.t, c.d, c.exact, c.rows, c.w.cols, []weightShape{c.w})
			pp := p.projs[0]
			require.Equal(t, c.want, pp.kernel == gemmCoop2, "on matmul_coop2.comp (kernel %d)", pp.kernel)
			if !c.want {
				return
			}
			require.Equal(t, c.tile, pp.tile2)
			require.Equal(t, c.split, pp.half.split, "W in hi + lo halves")
			require.True(t, p.halfX, "x in float16 first")
			require.Equal(t, int(ceilDiv(c.rows, c.tile.bm))*c.tile.bm, p.halfXRows, "x's halves cover whole tiles")
		})
	}
}

// The parts of one MatMul's split products lie back to back, each range
// starting on 16 bytes for the cooperative-matrix stores into it, though
// the usual kernel's parts before it end off that (129 rows x 1001
// outputs, 3 parts of K = 1536).
func TestPlanSplitsAlignsEachRange(t *testing.T) {
	on := DefaultTuning()
	on.Coop2SplitK, on.Coop2MinGroupsTensor = true, 32 // 16 workgroups x 3 parts
	d := h200
	d.sharedMem = 48 << 10
	d.coop2 = coop2Caps{gran: [3]int{32, 32, 16}, maxDim: 256, tensor: true}
	ragged := weightShape{rows: 1001, cols: 1536}
	k := weightShape{rows: 1024, cols: 1536}
	p := planMatMul(&on, d, false, 129, 1536, []weightShape{ragged, k})
	first, second := p.projs[0], p.projs[1]
	require.Equal(t, gemmCoop, first.kernel)
	require.Equal(t, gemmCoop2, second.kernel)
	require.Equal(t, 3, first.split.parts)
	require.Equal(t, 3, second.split.parts)
	require.NotZero(t, first.split.hi%16, "the first range ends off 16 bytes")
	require.Equal(t, align16(first.split.hi), second.split.lo)
	require.Equal(t, second.split.hi, p.parts)
}

// With Coop2SplitK, a product of too few workgroups of tensor-load tiles
// takes them split along K where the parts reach Coop2MinGroupsTensor
// (bonsai-8b's q, k, v, o and down at T=128), each part padded to whole
// tiles of rows; never on staged tiles, where K is too short for two
// chunks, or with the switch off.
func TestPlanMatMulSplitsCoop2(t *testing.T) {
	on := DefaultTuning()
	on.Coop2SplitK = true
	tensor := h200
	tensor.sharedMem = 48 << 10
	tensor.coop2 = coop2Caps{gran: [3]int{32, 32, 16}, maxDim: 256, tensor: true}
	staged := tensor
	staged.coop2.tensor = false
	q := weightShape{rows: 4096, cols: 4096}
	kv := weightShape{rows: 1024, cols: 4096}
	down := weightShape{rows: 4096, cols: 12288}
	f16 := weightShape{rows: 4096, cols: 4096, f16: true, exactInHalf: true}
	shortK := weightShape{rows: 4096, cols: 768}
	for _, c := range []struct {
		name         string
		t            Tuning
		d            devCaps
		exact        bool
		rows         int
		w            weightShape
		coop2        bool
		parts, chunk int
	}{
		{"q at T=128: 32 workgroups, 8 parts", on, tensor, false, 128, q, true, 8, 512},
		{"k at T=128: 8 workgroups, 8 parts make 64", on, tensor, false, 128, kv, true, 8, 512},
		{"down at T=128", on, tensor, false, 128, down, true, 8, 1536},
		{"F16 q at T=128", on, tensor, false, 128, f16, true, 8, 512},
		{"q at T=300: 96 workgroups, whole", on, tensor, false, 300, q, true, 0, 0},
		{"q at T=200, a partial tile: 64 workgroups, whole", on, tensor, false, 200, q, true, 0, 0},
		{"exact q at T=128", on, tensor, true, 128, q, true, 8, 512},
		{"k at T=140: 16 workgroups, 8 parts make 128", on, tensor, false, 140, kv, true, 8, 512},
		{"K of 768: no two chunks", on, tensor, false, 128, shortK, false, 0, 0},
		{"staged tiles", on, staged, false, 128, q, false, 0, 0},
		{"switch off", DefaultTuning(), tensor, false, 128, q, false, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := planMatMul(&c.t, c.d, c.exact, c.rows, c.w.cols, []weightShape{c.w})
			pp := p.projs[0]
			require.Equal(t, c.coop2, pp.kernel == gemmCoop2, "on matmul_coop2.comp (kernel %d)", pp.kernel)
			if !c.coop2 {
				return
			}
			require.Equal(t, c.parts, pp.split.parts)
			require.Equal(t, c.chunk, pp.split.chunk)
			if c.parts == 0 {
				require.Zero(t, p.parts, "no parts buffer")
				return
			}
			padded := int(ceilDiv(c.rows, pp.tile2.bm)) * pp.tile2.bm
			require.Equal(t, padded*c.w.rows, pp.split.stride, "each part holds whole tiles of rows")
			require.Equal(t, 4*uint64(c.parts*padded*c.w.rows), p.parts, "the parts buffer")
			require.Zero(t, pp.split.chunk%pp.tile2.bk, "whole steps of K")
			require.GreaterOrEqual(t, coop2Groups(pp.tile2, c.rows, c.w.rows)*c.parts, c.t.Coop2MinGroupsTensor)
		})
	}
}

// A device is opened with workgroup-scope matrices unasked only where it
// loads them by tensor addressing; asked, also where it stages them;
// STRATA_COOP2 overrules both ways.
func TestWantsCoop2(t *testing.T) {
	staged, tensor := coop2Caps{maxDim: 256}, coop2Caps{maxDim: 256, tensor: true}
	for _, c := range []struct {
		env  string
		o    Options
		caps coop2Caps
		want bool
	}{
		{"", Options{}, tensor, true},
		{"", Options{}, staged, false},
		{"", Options{Coop2: true}, staged, true},
		{"on", Options{}, staged, true},
		{"off", Options{Coop2: true}, tensor, false},
	} {
		t.Setenv("STRATA_COOP2", c.env)
		require.Equal(t, c.want, wantsCoop2(c.o, c.caps), "STRATA_COOP2=%q, %+v, tensor loads %v", c.env, c.o, c.caps.tensor)
	}
}
