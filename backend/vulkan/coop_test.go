package vulkan_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/x448/float16"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/backend/vulkan"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/model"
)

// The cooperative-matrix GEMM multiplies float16 parts. At exact precision
// x is split into hi + lo parts and must keep float32's accuracy over long
// rows; at fast precision each product is of float16-rounded inputs. Every
// tile shape is held to a float64 reference, on ragged edges, on x
// converted once by tohalf.comp (K % 8 == 0) and in each tile, there in
// 16-byte pieces (K % 4 == 0) or not, with weights decoded to float16 by
// weights16.comp first or in each tile (split in hi + lo halves there too at
// exact precision), split along K or not, and rows of x or of W past
// float16's range must fall back to float32.
func TestCoopMatMulEveryTileKeepsItsPrecision(t *testing.T) {
	b := testBackend(t)
	if !vulkan.Coop(b) {
		t.Skip("the device has no cooperative-matrix GEMMs (VK_NV_cooperative_matrix with float16)")
	}
	cases := []struct {
		typ         gguf.Type
		cols        int
		exactInHalf bool // never decoded first: in each tile, or read as float16 (F16, K % 8 == 0)
	}{{gguf.Q1_0_G128, 4096, true}, {gguf.TQ2_0_G128, 1024, true}, {gguf.F16, 1004, true}, {gguf.F16, 998, true}, {gguf.F16, 1024, true}, {gguf.Q4_K, 1024, false}, {gguf.F32, 512, false},
		{gguf.F32, 1001, false}} // K % 8 != 0: x split in the tiles too, beside the weights
	for ti, tile := range vulkan.CoopTiles() {
		for _, prec := range []backend.Precision{backend.PrecisionExact, backend.PrecisionFast} {
			for _, c := range cases {
				for _, halfW := range []bool{false, true} {
					if halfW && (c.exactInHalf || c.cols%8 != 0) {
						continue // weights16.comp is not used for these
					}
					splitW := !c.exactInHalf && prec == backend.PrecisionExact
					for _, split := range []bool{false, true} {
						if split && c.cols < 1024 {
							continue // too short to split
						}
						for _, big := range []float32{0, 1e5} {
							t.Run(fmt.Sprintf("%s/%v/%v/K=%d/halfW=%v/split=%v/big=%g", tile, prec, c.typ, c.cols, halfW, split, big), func(t *testing.T) {
								r := newRig(t, 7)
								tu := vulkan.Tune(r.vs)
								if !vulkan.ForceCoopTile(b, tu, ti, prec == backend.PrecisionExact, splitW) {
									t.Skip("the tile needs more shared memory than the device has")
								}
								vulkan.HalfWRowsAll(tu, map[bool]int{false: math.MaxInt, true: 0}[halfW])
								tu.ExactInTileElems, tu.SplitK = 0, split
								// 130 rows and 300 outputs: full tiles and ragged ones.
								rows, cols, n := 130, c.cols, 300
								xs := r.values(rows*cols, 1)
								if big != 0 {
									// Row 70 leaves float16's range: its tile must be recomputed.
									xs[70*cols+5], xs[70*cols+cols-3] = big, -big
								}
								x := r.tensor("x", xs)
								w := quantized(t, r, "w", n, cols, c.typ)
								if big != 0 && c.typ == gguf.F32 {
									// So does W's row 17 (split or rounded to float16).
									binary.LittleEndian.PutUint32(w.Data[4*(17*cols+9):], math.Float32bits(-big))
								}
								wv, err := b.Upload(w)
								require.NoError(t, err)
								r.vs.SetPrecision(prec)
								require.Equal(t, split, vulkan.SplitParts(r.vs, rows, wv) > 1, "split along K")
								require.True(t, vulkan.TakesCoop(r.vs, rows, wv), "on cooperative matrices")
								direct := c.typ == gguf.F16 && c.cols%8 == 0 // F16 read as it is
								require.Equal(t, halfW || direct, vulkan.HalvesFirst(r.vs, rows, wv), "weights in float16 first")
								ws := make([]float32, n*cols)
								w.Format.Dequantize(ws, w.Data)
								bias := r.values(n, 1)
								bv := r.tensor("bias", bias)
								y := r.zeros("y", rows*n)
								r.vs.SetPrecision(prec)
								r.vs.MatMul(x.v, rows, backend.Proj{W: wv, Dst: y.v, Bias: bv.v})
								got := make([]float32, rows*n)
								require.NoError(t, r.vs.Read(y.v, 0, got))
								worst := worstOfSum(got, xs, ws, bias, rows, n, cols)
								// Exact: float32 sums of up to 4096 terms, while tensor
								// cores truncate each of the K/16 accumulations rather than
								// round (Fasi et al. 2021, "Numerical behavior of NVIDIA
								// tensor cores"): 1e-5 of sum |x w| covers both. Fast: both
								// inputs rounded to float16 (2^-11 each), so 2^-9.
								bound := 1e-5
								if prec == backend.PrecisionFast {
									bound = math.Pow(2, -9) // the tile recomputed in float32 is well within it
								}
								require.LessOrEqual(t, worst, bound, "largest error relative to sum |x w|")
							})
						}
					}
				}
			}
		}
	}
}

// worstOfSum is the largest error of got (rows x n) against x W^T + bias
// (bias may be nil) in float64, relative to sum |x w| + |bias|.
func worstOfSum(got, xs, ws, bias []float32, rows, n, cols int) float64 {
	var worst float64
	for m := range rows {
		for j := range n {
			var want, mag float64
			if bias != nil {
				want, mag = float64(bias[j]), math.Abs(float64(bias[j]))
			}
			for k := range cols {
				p := float64(xs[m*cols+k]) * float64(ws[j*cols+k])
				want += p
				mag += math.Abs(p)
			}
			worst = max(worst, math.Abs(float64(got[m*n+j])-want)/mag)
		}
	}
	return worst
}

// TestCoopExactShortProductsTakeHalvesFirst: at exact precision, products
// of weights not exact in float16, of 2^21 elements or more, take the
// cooperative GEMM on hi + lo halves made first from 9 rows of x up (below
// 128 they ran on the portable kernel before 2026-12-04), split along K
// as a prefill's are, and keep float32's accuracy there; smaller weights
// keep the portable kernel below 128 rows; at fast precision, fewer than
// 128 rows decode the weights in the tiles.
func TestCoopExactShortProductsTakeHalvesFirst(t *testing.T) {
	b := testBackend(t)
	if !vulkan.Coop(b) {
		t.Skip("the device has no cooperative-matrix GEMMs (VK_NV_cooperative_matrix with float16)")
	}
	r := newRig(t, 11)
	const cols, n = 1024, 2048 // 2^21 elements
	for _, typ := range []gguf.Type{gguf.Q4_K, gguf.Q8_0} {
		small, err := b.Upload(quantized(t, r, "small", 200, cols, typ))
		require.NoError(t, err)
		r.vs.SetPrecision(backend.PrecisionExact)
		require.False(t, vulkan.HalvesFirst(r.vs, 20, small), "%v, 200 x %d at 20 rows", typ, cols)
		require.True(t, vulkan.HalvesFirst(r.vs, 128, small), "%v, 200 x %d at 128 rows", typ, cols)
		w := quantized(t, r, "w", n, cols, typ)
		wv, err := b.Upload(w)
		require.NoError(t, err)
		ws := make([]float32, n*cols)
		w.Format.Dequantize(ws, w.Data)
		for _, rows := range []int{9, 20, 127} {
			r.vs.SetPrecision(backend.PrecisionExact)
			require.True(t, vulkan.HalvesFirst(r.vs, rows, wv), "%v, %d rows", typ, rows)
			require.Greater(t, vulkan.SplitParts(r.vs, rows, wv), 1, "%v, %d rows: split along K", typ, rows)
			xs := r.values(rows*cols, 1)
			x, y := r.tensor("x", xs), r.zeros("y", rows*n)
			r.vs.MatMul(x.v, rows, backend.Proj{W: wv, Dst: y.v})
			got := make([]float32, rows*n)
			require.NoError(t, r.vs.Read(y.v, 0, got))
			// As TestCoopMatMulEveryTileKeepsItsPrecision's exact bound.
			require.LessOrEqual(t, worstOfSum(got, xs, ws, nil, rows, n, cols), 1e-5, "%v, %d rows: largest error relative to sum |x w|", typ, rows)
		}
		r.vs.SetPrecision(backend.PrecisionFast)
		require.False(t, vulkan.HalvesFirst(r.vs, 20, wv), "%v at fast precision", typ)
	}
}

// At exact precision a tile that splits its weights in hi + lo halves
// itself gives the same bits as one that reads the halves weights16.comp
// made first: both split with half.glsl's split, and run the same products
// in the same order. (Weights past float16's range are the precision
// test's: weights16.comp flags a whole row, a tile only the steps it reads,
// so the parts of a product split along K may go to float32 on one route
// and not on the other.)
func TestCoopExactSplitInTileEqualsHalvesFirst(t *testing.T) {
	b := testBackend(t)
	if !vulkan.Coop(b) {
		t.Skip("the device has no cooperative-matrix GEMMs (VK_NV_cooperative_matrix with float16)")
	}
	r := newRig(t, 13)
	tu := vulkan.Tune(r.vs)
	tu.ExactInTileElems = 0
	const rows, n, cols = 150, 300, 2048 // ragged tiles; K split at 150 rows
	for _, typ := range []gguf.Type{gguf.Q4_0, gguf.Q8_0, gguf.Q4_K, gguf.Q6_K, gguf.F32} {
		wv, err := b.Upload(quantized(t, r, "w", n, cols, typ))
		require.NoError(t, err)
		xs := r.values(rows*cols, 1)
		x := r.tensor("x", xs)
		for ti, tile := range vulkan.CoopTiles() {
			if !vulkan.ForceCoopTile(b, tu, ti, true, true) {
				continue
			}
			var got [2][]float32
			for i, first := range []bool{true, false} {
				vulkan.HalfWRowsAll(tu, map[bool]int{true: 0, false: math.MaxInt}[first])
				r.vs.SetPrecision(backend.PrecisionExact)
				require.Equal(t, first, vulkan.HalvesFirst(r.vs, rows, wv))
				y := r.zeros("y", rows*n)
				r.vs.MatMul(x.v, rows, backend.Proj{W: wv, Dst: y.v})
				got[i] = make([]float32, rows*n)
				require.NoError(t, r.vs.Read(y.v, 0, got[i]))
			}
			require.Equal(t, got[0], got[1], "%v, tile %s", typ, tile)
		}
	}
}

// BenchmarkCoopTiles times the cooperative GEMM of BenchmarkMatMul's shape
// with every tile shape, its weights decoded in each tile (split in hi + lo
// halves there at exact precision) or once to float16 first (halfW, the
// decoding timed with the product), for choosing coopTileFor's tile and
// Tuning.HalfWRows.
func BenchmarkCoopTiles(b *testing.B) {
	r := newRig(b, 3)
	v := benchBackend(b)
	if !vulkan.Coop(v) {
		b.Skip("no cooperative-matrix GEMMs")
	}
	const k = 4096
	for _, n := range []int{12288, 1024} { // bonsai-8b's FFN and K/V widths
		for _, typ := range []gguf.Type{gguf.Q1_0_G128, gguf.Q4_K, gguf.Q6_K, gguf.Q8_0} {
			w, err := v.Upload(quantized(b, r, "w", n, k, typ))
			if err != nil {
				b.Fatal(err)
			}
			exactInHalf := typ == gguf.Q1_0_G128 // weights16.comp is not used for it
			for _, rows := range []int{128, 512, 2048} {
				for _, prec := range []backend.Precision{backend.PrecisionExact, backend.PrecisionFast} {
					for ti, tile := range vulkan.CoopTiles() {
						for _, halfW := range []bool{false, true} {
							if halfW && exactInHalf {
								continue
							}
							b.Run(fmt.Sprintf("n=%d/%v/T=%d/%v/%s/halfW=%v", n, typ, rows, prec, tile, halfW), func(b *testing.B) {
								tu := vulkan.DefaultTuning()
								if !vulkan.ForceCoopTile(v, &tu, ti, prec == backend.PrecisionExact, !exactInHalf && prec == backend.PrecisionExact) {
									b.Skip("too much shared memory")
								}
								vulkan.HalfWRowsAll(&tu, map[bool]int{false: math.MaxInt, true: 0}[halfW])
								timeMatMul(b, r, v, tu, w, rows, n, k, prec)
							})
						}
					}
				}
			}
		}
	}
}

// BenchmarkMatMul times one GEMM of bonsai-8b's FFN shape (x of T rows by
// 4096, W of 12288 rows) on the tiled kernels: cooperative-matrix where the
// device has them, at each precision, and the portable one. Exact products
// of weights not exact in float16 (Q4_K) take the cooperative kernel with
// x and W in float16 first ("coop"), or split in the tiles ("coop-tile-x",
// since the fifth session of 2026-12-04; the portable kernel before). It
// opens its own backend: the shared one validates every call.
func BenchmarkMatMul(b *testing.B) {
	r := newRig(b, 3)
	v := benchBackend(b)
	const n, k = 12288, 4096
	for _, typ := range []gguf.Type{gguf.Q1_0_G128, gguf.TQ2_0_G128, gguf.Q4_K} {
		w, err := v.Upload(quantized(b, r, "w", n, k, typ))
		if err != nil {
			b.Fatal(err)
		}
		for _, rows := range []int{128, 512, 2048} {
			for _, kernel := range []string{"coop", "coop-whole-k", "coop-tile-x", "portable"} {
				coop := kernel != "portable"
				if coop && !vulkan.Coop(v) {
					continue
				}
				for _, prec := range []backend.Precision{backend.PrecisionExact, backend.PrecisionFast} {
					b.Run(fmt.Sprintf("%v/T=%d/%s/%v", typ, rows, kernel, prec), func(b *testing.B) {
						tu := vulkan.DefaultTuning()
						tu.Coop = coop
						// coop-tile-x converts x to float16 in each tile, as before tohalf.comp.
						tu.HalfX = kernel != "coop-tile-x"
						// coop-whole-k does not split products along K.
						tu.SplitK = kernel == "coop"
						timeMatMul(b, r, v, tu, w, rows, n, k, prec)
					})
				}
			}
		}
	}
}

// BenchmarkSplitK times the narrower GEMMs of bonsai-8b (the attention's
// 4096 x 4096 and its K and V, 1024 x 4096) at small T, where they have too
// few tiles to fill the device, split along K and not.
func BenchmarkSplitK(b *testing.B) {
	r := newRig(b, 3)
	v := benchBackend(b)
	if !vulkan.Coop(v) {
		b.Skip("no cooperative-matrix GEMMs")
	}
	// split: none, the usual rule, or every product of fewer than 512
	// workgroups (the FFN's 96 at T=128 among them).
	for _, shape := range [][2]int{{4096, 4096}, {1024, 4096}, {12288, 4096}, {4096, 12288}} {
		n, k := shape[0], shape[1]
		for _, typ := range []gguf.Type{gguf.Q1_0_G128, gguf.Q4_K} {
			w, err := v.Upload(quantized(b, r, "w", n, k, typ))
			if err != nil {
				b.Fatal(err)
			}
			for _, rows := range []int{128, 512} {
				for _, prec := range []backend.Precision{backend.PrecisionExact, backend.PrecisionFast} {
					for _, split := range []string{"none", "usual", "below512"} {
						b.Run(fmt.Sprintf("n=%d/k=%d/%v/T=%d/%v/split=%s", n, k, typ, rows, prec, split), func(b *testing.B) {
							tu := vulkan.DefaultTuning()
							tu.SplitK = split != "none"
							if split == "below512" {
								vulkan.SplitBelowAll(&tu, 512)
							}
							timeMatMul(b, r, v, tu, w, rows, n, k, prec)
						})
					}
				}
			}
		}
	}
}

// BenchmarkExactHalvesFirst times exact products of weights not exact in
// float16 with their hi + lo halves made first ("first": weights16.comp,
// timed with the product), made in each tile ("tile"), and on the portable
// kernel, on bonsai-8b's weights (FFN up, attention, FFN down): for choosing
// Tuning.HalfWRows at exact precision.
func BenchmarkExactHalvesFirst(b *testing.B) {
	r := newRig(b, 3)
	v := benchBackend(b)
	if !vulkan.Coop(v) {
		b.Skip("no cooperative-matrix GEMMs")
	}
	// Then Qwen3-30B-A3B's experts (gate/up, down) and tiny-qwen3moe's, of
	// fewer than coopHalfWSmallElems elements.
	for _, shape := range []struct{ n, k int }{{12288, 4096}, {4096, 4096}, {4096, 12288}, {768, 2048}, {2048, 768}, {256, 256}} {
		for _, typ := range []gguf.Type{gguf.Q4_K, gguf.Q6_K, gguf.Q8_0} {
			w, err := v.Upload(quantized(b, r, "w", shape.n, shape.k, typ))
			if err != nil {
				b.Fatal(err)
			}
			for _, rows := range []int{16, 32, 64, 128, 512, 2048} {
				for _, mode := range []string{"first", "tile", "portable"} {
					if mode == "portable" && rows > 128 {
						continue
					}
					b.Run(fmt.Sprintf("%dx%d/%v/T=%d/%s", shape.n, shape.k, typ, rows, mode), func(b *testing.B) {
						tu := vulkan.DefaultTuning()
						vulkan.HalfWRowsAll(&tu, map[string]int{"first": 0, "tile": math.MaxInt, "portable": math.MaxInt}[mode])
						tu.ExactInTileElems = map[bool]int{true: 0, false: math.MaxInt}[mode == "tile"]
						timeMatMul(b, r, v, tu, w, rows, shape.n, shape.k, backend.PrecisionExact)
					})
				}
			}
		}
	}
}

// timeMatMul times x[rows][k] times w (n x k) on a fresh stream of v
// tuned by tu.
func timeMatMul(b *testing.B, r *rig, v *vulkan.Backend, tu vulkan.Tuning, w backend.Matrix, rows, n, k int, prec backend.Precision) {
	s := v.NewStream()
	vulkan.SetTuning(s, tu)
	s.SetPrecision(prec)
	x, err := s.Alloc("x", rows*k)
	if err != nil {
		b.Fatal(err)
	}
	s.Write(x, 0, r.values(rows*k, 1))
	y, err := s.Alloc("y", rows*n)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		b.Fatal(err)
	}
	// A tenth of a second of the product first, so that the device's clocks
	// have risen before the timing starts.
	for start := time.Now(); time.Since(start) < 100*time.Millisecond; {
		s.MatMul(x, rows, backend.Proj{W: w, Dst: y})
		if err := s.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		s.MatMul(x, rows, backend.Proj{W: w, Dst: y})
		if err := s.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(2*float64(rows)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
}

// weights16.comp gives the cooperative GEMM every format's weights in
// float16 as it would round them itself, and flags the rows it cannot hold.
// It runs wherever there is Vulkan (lavapipe too), though only devices with
// cooperative matrices use it.
func TestWeightsToHalfEveryFormat(t *testing.T) {
	types := []gguf.Type{gguf.F32, gguf.F16, gguf.BF16, gguf.Q8_0, gguf.Q4_0, gguf.Q1_0_G128, gguf.TQ2_0_G128, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K}
	for _, typ := range types {
		t.Run(typ.String(), func(t *testing.T) {
			r := newRig(t, 11)
			const rows, cols = 37, 512
			w := quantized(t, r, "w", rows, cols, typ)
			if typ == gguf.F32 {
				binary.LittleEndian.PutUint32(w.Data[4*(5*cols+100):], math.Float32bits(7e4)) // row 5 leaves float16's range
			}
			want := make([]float32, rows*cols)
			w.Format.Dequantize(want, w.Data)
			wv, err := testBackend(t).Upload(w)
			require.NoError(t, err)
			out := r.zeros("halves", rows*cols/2+rows)
			vulkan.WeightsToHalf(r.vs, wv, out.v)
			got := make([]float32, rows*cols/2+rows)
			require.NoError(t, r.vs.Read(out.v, 0, got))
			for i, v := range want {
				word := math.Float32bits(got[i/2])
				h := float16.Frombits(uint16(word >> (16 * (i % 2)))).Float32()
				if math.Abs(float64(v)) > 65504 {
					continue // its row is flagged
				}
				// Round to nearest: within half a unit in the last of float16's
				// 11 significant bits, or of its smallest subnormal step.
				tol := max(math.Abs(float64(v))*math.Pow(2, -11), math.Pow(2, -25))
				require.InDelta(t, v, h, tol, "weight %d of row %d", i%cols, i/cols)
				if typ == gguf.F16 || typ == gguf.Q1_0_G128 || typ == gguf.TQ2_0_G128 {
					require.Equal(t, v, h, "weight %d of row %d: exact in float16", i%cols, i/cols)
				}
			}
			for row := range rows {
				want := uint32(0)
				if typ == gguf.F32 && row == 5 {
					want = 1
				}
				require.Equal(t, want, math.Float32bits(got[rows*cols/2+row]), "range flag of row %d", row)
			}
		})
	}
}

// splitk.comp adds up the parts of a product split along K, in order, and
// the bias once; parts packed (the usual kernel's) or padded past their
// rows (matmul_coop2.comp's, whose last tile is stored whole). Run wherever
// there is Vulkan (lavapipe too).
func TestSumPartsAddsEachPartAndTheBiasOnce(t *testing.T) {
	r := newRig(t, 5)
	const rows, cols, parts = 7, 33, 3
	for _, stride := range []int{rows * cols, (rows + 5) * cols} {
		ps := r.values(parts*stride, 1)
		bias := r.values(cols, 1)
		part, b := r.tensor("parts", ps), r.tensor("bias", bias)
		for _, withBias := range []bool{false, true} {
			dst := r.zeros("y", rows*cols)
			var bv backend.Tensor
			if withBias {
				bv = b.v
			}
			vulkan.SumParts(r.vs, part.v, dst.v, bv, rows, cols, parts, stride)
			got := make([]float32, rows*cols)
			require.NoError(t, r.vs.Read(dst.v, 0, got))
			for i := range got {
				want := float32(0)
				for z := range parts {
					want += ps[z*stride+i] // float32 sums in the shader's order: the same bits
				}
				if withBias {
					want += bias[i%cols]
				}
				require.Equal(t, want, got[i], "element %d, bias %v, stride %d", i, withBias, stride)
			}
		}
	}
}

// TestKernelStatistics compiles the cooperative GEMM with every tile, at
// both precisions, its weights decoded in the tiles and first, and prints
// what the driver reports of each (registers, shared memory, spills: run
// with -v when choosing tiles). Every kernel must report something.
func TestKernelStatistics(t *testing.T) {
	testBackend(t) // skips where there is no Vulkan device
	v, err := vulkan.Open(vulkan.Options{KernelStatistics: true})
	require.NoError(t, err)
	defer v.Close()
	if _, err := v.KernelStatistics(); err != nil {
		t.Skip(err)
	}
	// Any kernel reports something: a portable one first.
	s := v.NewStream()
	p, err := s.Alloc("p", 64)
	require.NoError(t, err)
	s.Softmax(p, p, 1, 64)
	require.NoError(t, s.Sync())
	stats, err := v.KernelStatistics()
	require.NoError(t, err)
	require.NotEmpty(t, stats)
	require.NotEmpty(t, stats[0].Stats, stats[0].Kernel)
	if !vulkan.Coop(v) {
		t.Skip("no cooperative-matrix GEMMs")
	}
	tu := vulkan.Tune(s)
	tu.ExactInTileElems = 0
	r := newRig(t, 5)
	const rows, n, k = 256, 256, 512
	x, err := s.Alloc("x", rows*k)
	require.NoError(t, err)
	y, err := s.Alloc("y", rows*n)
	require.NoError(t, err)
	for _, typ := range []gguf.Type{gguf.Q1_0_G128, gguf.Q4_K} {
		w, err := v.Upload(quantized(t, r, "w", n, k, typ))
		require.NoError(t, err)
		for ti := range vulkan.CoopTiles() {
			for _, prec := range []backend.Precision{backend.PrecisionExact, backend.PrecisionFast} {
				exact := prec == backend.PrecisionExact
				if !vulkan.ForceCoopTile(v, tu, ti, exact, exact && typ != gguf.Q1_0_G128) {
					continue
				}
				s.SetPrecision(prec)
				for _, first := range []int{0, math.MaxInt} { // Q4_K's weights decoded first and in the tiles
					vulkan.HalfWRowsAll(tu, first)
					s.MatMul(x, rows, backend.Proj{W: w, Dst: y})
				}
			}
		}
	}
	// flash_coop.comp along each route of K and V, at both precisions, in
	// workgroups of 64 and 128 rows.
	const T, heads, hd = 256, 4, 128
	a := &backend.Attention{T: T, Heads: heads, KVHeads: 1, HeadDim: hd, Scale: 1}
	for _, x := range []*backend.Tensor{&a.Q, &a.K, &a.V, &a.Z} {
		*x, err = s.Alloc("attention", T*heads*hd)
		require.NoError(t, err)
	}
	for _, kv := range flashKVRoutes {
		for _, rows := range []int{64, 128} {
			func() {
				vulkan.FlashHalfKV(tu, kv.halves)
				vulkan.FlashCoopRows(tu, rows, false)
				for _, prec := range []backend.Precision{backend.PrecisionExact, backend.PrecisionFast} {
					s.SetPrecision(prec)
					s.FlashAttention(a)
				}
				require.NoError(t, s.Sync())
			}()
		}
	}
	require.NoError(t, s.Sync())
	stats, err = v.KernelStatistics()
	require.NoError(t, err)
	for _, k := range stats {
		require.NotEmpty(t, k.Stats, k.Kernel)
		if strings.HasPrefix(k.Kernel, "matmul_") || strings.HasPrefix(k.Kernel, "flash") {
			t.Logf("%s %v %v", k.Kernel, k.Spec, k.Stats)
		}
	}
}

// BenchmarkWeightsInTile times fast products of bonsai-8b's four weight
// shapes in the quantized formats with their weights decoded in each tile
// ("tile") or to float16 first ("first", weights16.comp timed with the
// product), each on the tile the planner picks for it, beside Q1_0_g128 (in
// the tiles always): for choosing Tuning.HalfWRows.Fast per format.
func BenchmarkWeightsInTile(b *testing.B) {
	r := newRig(b, 3)
	v := benchBackend(b)
	if !vulkan.Coop(v) {
		b.Skip("no cooperative-matrix GEMMs")
	}
	for _, shape := range []struct{ n, k int }{{12288, 4096}, {4096, 12288}, {4096, 4096}, {1024, 4096}} {
		for _, typ := range []gguf.Type{gguf.Q1_0_G128, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K, gguf.Q8_0, gguf.Q4_0} {
			w, err := v.Upload(quantized(b, r, "w", shape.n, shape.k, typ))
			if err != nil {
				b.Fatal(err)
			}
			for _, rows := range []int{128, 512, 2048} {
				for _, mode := range []string{"tile", "first"} {
					if mode == "first" && typ == gguf.Q1_0_G128 {
						continue
					}
					b.Run(fmt.Sprintf("%dx%d/%v/T=%d/%s", shape.n, shape.k, typ, rows, mode), func(b *testing.B) {
						tu := vulkan.DefaultTuning()
						vulkan.HalfWRowsAll(&tu, map[string]int{"first": 0, "tile": math.MaxInt}[mode])
						timeMatMul(b, r, v, tu, w, rows, shape.n, shape.k, backend.PrecisionFast)
					})
				}
			}
		}
	}
}

// matmul_coop2.comp keeps each precision's bound for every format it takes
// (F16 read as it is, the others decoded to float16 first, in hi + lo
// halves at exact precision; Q1_0_g128 at fast precision where the device
// has tensor loads): on whole tiles of rows, with a last partial
// tile (300 and 700 rows), and with a row
// of x, or of F32 weights, past float16's range, whose tiles are computed
// in float32; on the tiles kernel choice gives (by tensor loads where the
// device has them) and, with a partial tile, on tiles staged through
// shared memory.
func TestCoop2MatMulKeepsItsPrecision(t *testing.T) {
	b := needCoop2(t)
	t.Log(vulkan.Coop2Caps(b))
	for _, prec := range []backend.Precision{backend.PrecisionExact, backend.PrecisionFast} {
		for _, typ := range []gguf.Type{gguf.F16, gguf.Q4_K, gguf.Q6_K, gguf.Q8_0, gguf.Q4_0, gguf.F32, gguf.Q1_0_G128} {
			if typ == gguf.Q1_0_G128 && (prec == backend.PrecisionExact || !vulkan.Coop2Tensor(b)) {
				continue // exact in float16: decoded first only for tensor loads at fast precision
			}
			for _, rows := range []int{256, 300, 700} {
				for _, big := range []float32{0, 1e5} {
					for _, staged := range []bool{false, true} {
						if staged && (rows != 300 || !vulkan.Coop2Tensor(b)) {
							continue
						}
						t.Run(fmt.Sprintf("%v/%v/rows=%d/big=%g/staged=%v", prec, typ, rows, big, staged), func(t *testing.T) {
							r := coop2Rig(t, 8)
							if staged {
								vulkan.ForceCoop2Tile(vulkan.Tune(r.vs), 128, 128, 32, false)
							}
							cols, n := 1024, 384
							xs := r.values(rows*cols, 1)
							if big != 0 {
								xs[(rows-3)*cols+5], xs[70*cols+cols-3] = big, -big // in the last tile and in the first
							}
							w := quantized(t, r, "w", n, cols, typ)
							if big != 0 && typ == gguf.F32 {
								binary.LittleEndian.PutUint32(w.Data[4*(200*cols+9):], math.Float32bits(-big))
							}
							requireCoop2Product(t, b, r, xs, w, rows, prec, false)
						})
					}
				}
			}
		}
	}
}

// requireCoop2Product runs x (rows of values xs) by w at prec, on
// workgroup-scope matrices (split along K with split), and holds the result
// to TestCoopMatMulEveryTileKeepsItsPrecision's bounds: float32 sums on
// tensor cores at exact precision; at fast, both inputs rounded to float16
// (2^-11 each).
func requireCoop2Product(t *testing.T, b *vulkan.Backend, r *rig, xs []float32, w *model.Weight, rows int, prec backend.Precision, split bool) {
	x := r.tensor("x", xs)
	wv, err := b.Upload(w)
	require.NoError(t, err)
	r.vs.SetPrecision(prec)
	require.True(t, vulkan.TakesCoop2(r.vs, rows, wv), "on workgroup-scope cooperative matrices")
	require.Equal(t, split, vulkan.SplitParts(r.vs, rows, wv) > 1, "split along K")
	n, cols := w.Rows, w.Cols
	ws := make([]float32, n*cols)
	w.Format.Dequantize(ws, w.Data)
	y := r.zeros("y", rows*n)
	r.vs.MatMul(x.v, rows, backend.Proj{W: wv, Dst: y.v})
	got := make([]float32, rows*n)
	require.NoError(t, r.vs.Read(y.v, 0, got))
	bound := 1e-5
	if prec == backend.PrecisionFast {
		bound = math.Pow(2, -9)
	}
	require.LessOrEqual(t, worstOfSum(got, xs, ws, nil, rows, n, cols), bound, "largest error relative to sum |x w|")
}

// BenchmarkCoop2 times products of bonsai-8b's FFN shape at each precision
// on matmul_coop2.comp, on each tile (rows of W x rows of x x K a step)
// staged through shared memory (coop2) and by tensor loads (coop2t),
// against the usual cooperative GEMM, for F16 weights
// (read as they are) and Q4_K (decoded to float16 first for both, the
// decoding timed with the product).
func BenchmarkCoop2(b *testing.B) {
	r := newRig(b, 3)
	v := benchBackend(b)
	if !v.Coop2() {
		b.Skip("no workgroup-scope cooperative matrices, or opened without them (STRATA_COOP2=on)")
	}
	const n, k = 12288, 4096
	for _, typ := range []gguf.Type{gguf.F16, gguf.Q4_K} {
		w, err := v.Upload(quantized(b, r, "w", n, k, typ))
		if err != nil {
			b.Fatal(err)
		}
		for _, rows := range []int{128, 512, 2048} {
			for _, prec := range []backend.Precision{backend.PrecisionFast, backend.PrecisionExact} {
				b.Run(fmt.Sprintf("%v/T=%d/%v/usual", typ, rows, prec), func(b *testing.B) {
					tu := vulkan.DefaultTuning()
					vulkan.HalfWRowsAll(&tu, 0)
					tu.Coop2 = false
					timeMatMul(b, r, v, tu, w, rows, n, k, prec)
				})
				tiles := [][3]int{{128, 128, 64}, {128, 256, 64}, {256, 128, 64}, {128, 256, 32}, {64, 128, 64}, {32, 128, 64}, {64, 64, 64}}
				if prec == backend.PrecisionExact {
					tiles = [][3]int{{128, 128, 64}, {128, 128, 32}, {128, 256, 64}}
				}
				for _, tile := range tiles {
					for _, tensor := range []bool{false, true} {
						if rows%tile[1] != 0 || tensor && !vulkan.Coop2Tensor(v) {
							continue
						}
						kernel := map[bool]string{false: "coop2", true: "coop2t"}[tensor]
						b.Run(fmt.Sprintf("%v/T=%d/%v/%s/%dx%dx%d", typ, rows, prec, kernel, tile[0], tile[1], tile[2]), func(b *testing.B) {
							tu := vulkan.DefaultTuning()
							vulkan.HalfWRowsAll(&tu, 0)
							tu.Coop2MinGroups, tu.Coop2MinGroupsTensor = 1, 1
							vulkan.ForceCoop2Tile(&tu, tile[0], tile[1], tile[2], tensor)
							s := v.NewStream()
							defer s.Close()
							vulkan.SetTuning(s, tu)
							s.SetPrecision(prec)
							if !vulkan.TakesCoop2(s, rows, w) {
								b.Skip("the device's granularity does not take the tile")
							}
							timeMatMul(b, r, v, tu, w, rows, n, k, prec)
						})
					}
				}
			}
		}
	}
}

// With Coop2SplitK, products of too few workgroups for the tensor-load
// tiles take them split along K, summed by splitk.comp: within the bounds
// of TestCoop2MatMulKeepsItsPrecision at both precisions, with a last
// partial tile (rows 300) stored into its part's padding, and with values
// past float16's range in some tiles (computed in float32 over their
// part's K only).
func TestCoop2SplitAlongK(t *testing.T) {
	b := needCoop2(t)
	if !vulkan.Coop2Tensor(b) {
		t.Skip("split along K is for tensor-load tiles; the device stages its workgroup-scope matrices")
	}
	for _, prec := range []backend.Precision{backend.PrecisionExact, backend.PrecisionFast} {
		for _, typ := range []gguf.Type{gguf.F16, gguf.Q8_0} {
			for _, rows := range []int{128, 300} {
				for _, big := range []float32{0, 1e5} {
					t.Run(fmt.Sprintf("%v/%v/rows=%d/big=%g", prec, typ, rows, big), func(t *testing.T) {
						r := newRig(t, 10)
						tu := vulkan.Tune(r.vs)
						vulkan.HalfWRowsAll(tu, 0)
						// 2 or 6 workgroups of 128 x 128 tiles, 4 parts of 512 columns of K
						tu.Coop2SplitK, tu.Coop2MinGroupsTensor = true, 8
						cols, n := 2048, 256
						xs := r.values(rows*cols, 1)
						if big != 0 {
							xs[(rows-3)*cols+5], xs[70*cols+cols-3] = big, -big // in the first part and the last
						}
						requireCoop2Product(t, b, r, xs, quantized(t, r, "w", n, cols, typ), rows, prec, true)
					})
				}
			}
		}
	}
}

// BenchmarkCoop2Split times bonsai-8b's projections of too few workgroups
// for the tensor-load tiles at T=128 (q and o, k and v, down) on the usual
// kernel split along K, as the default tuning runs them, and on the
// tensor-load tiles split along K (Tuning.Coop2SplitK); fast precision,
// Q8_0's decoding to float16 first counted in for both.
func BenchmarkCoop2Split(b *testing.B) {
	r := newRig(b, 4)
	v := benchBackend(b)
	if !v.Coop2() || !vulkan.Coop2Tensor(v) {
		b.Skip("no workgroup-scope cooperative matrices loaded by tensor addressing")
	}
	const rows = 128
	for _, shape := range []struct {
		name string
		n, k int
	}{{"q", 4096, 4096}, {"k", 1024, 4096}, {"down", 4096, 12288}} {
		for _, typ := range []gguf.Type{gguf.F16, gguf.Q8_0} {
			w, err := v.Upload(quantized(b, r, "w", shape.n, shape.k, typ))
			if err != nil {
				b.Fatal(err)
			}
			for _, split := range []bool{false, true} {
				route := map[bool]string{false: "usual", true: "coop2t-split"}[split]
				b.Run(fmt.Sprintf("%s/%v/%s", shape.name, typ, route), func(b *testing.B) {
					tu := vulkan.DefaultTuning()
					tu.Coop2SplitK = split
					s := v.NewStream()
					defer s.Close()
					vulkan.SetTuning(s, tu)
					s.SetPrecision(backend.PrecisionFast)
					if vulkan.TakesCoop2(s, rows, w) != split {
						b.Fatalf("on workgroup-scope matrices: %v, want %v", !split, split)
					}
					timeMatMul(b, r, v, tu, w, rows, shape.n, shape.k, backend.PrecisionFast)
				})
			}
		}
	}
}

// Two products of one MatMul on matmul_coop2.comp, of different widths,
// each with a last partial tile (the scratch buffer they share grows for
// the second), the second written into a view of a larger tensor: every
// output lands in its place, and the tensor around the view is untouched.
func TestCoop2FusedProductsAndViews(t *testing.T) {
	b := needCoop2(t)
	r := coop2Rig(t, 9)
	r.vs.SetPrecision(backend.PrecisionFast)
	rows, cols, n1, n2 := 300, 512, 128, 384
	xs := r.values(rows*cols, 1)
	x := r.tensor("x", xs)
	w1, w2 := quantized(t, r, "w1", n1, cols, gguf.F16), quantized(t, r, "w2", n2, cols, gguf.Q8_0)
	v1, err := b.Upload(w1)
	require.NoError(t, err)
	v2, err := b.Upload(w2)
	require.NoError(t, err)
	require.True(t, vulkan.TakesCoop2(r.vs, rows, v1) && vulkan.TakesCoop2(r.vs, rows, v2), "both on workgroup-scope cooperative matrices")
	y1 := r.zeros("y1", rows*n1)
	const before, after = 1024, 333
	big := r.tensor("big", slices.Repeat([]float32{-7}, before+rows*n2+after))
	y2 := r.vs.View(big.v, before, rows*n2)
	require.NotNil(t, y2, "a view at a 4 KiB offset")
	r.vs.MatMul(x.v, rows, backend.Proj{W: v1, Dst: y1.v}, backend.Proj{W: v2, Dst: y2})
	for i, c := range []struct {
		w   *model.Weight
		n   int
		dst backend.Tensor
		off int
	}{{w1, n1, y1.v, 0}, {w2, n2, big.v, before}} {
		got := make([]float32, c.dst.Len())
		require.NoError(t, r.vs.Read(c.dst, 0, got))
		ws := make([]float32, c.n*cols)
		c.w.Format.Dequantize(ws, c.w.Data)
		require.LessOrEqual(t, worstOfSum(got[c.off:c.off+rows*c.n], xs, ws, nil, rows, c.n, cols), math.Pow(2, -9), "product %d", i)
		if i == 1 {
			require.Equal(t, slices.Repeat([]float32{-7}, before), got[:before], "before the view")
			require.Equal(t, slices.Repeat([]float32{-7}, after), got[before+rows*n2:], "after the view")
		}
	}
}

// needCoop2 is the shared backend, skipping t where it has no
// workgroup-scope cooperative matrices.
func needCoop2(t *testing.T) *vulkan.Backend {
	b := testBackend(t)
	if !b.Coop2() {
		t.Skip("the device has no workgroup-scope cooperative matrices (VK_NV_cooperative_matrix2), or was opened without them (STRATA_COOP2=on)")
	}
	return b
}

// coop2Rig is a rig whose products take matmul_coop2.comp wherever it
// can: every format's weights in float16 first, however few workgroups.
func coop2Rig(t *testing.T, seed uint64) *rig {
	r := newRig(t, seed)
	tu := vulkan.Tune(r.vs)
	vulkan.HalfWRowsAll(tu, 0)
	tu.Coop2MinGroups, tu.Coop2MinGroupsTensor = 1, 1
	return r
}
