package vulkan_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gpu"
	"github.com/stratalab/strata/gpu/vulkan"
)

// The cooperative-matrix GEMM multiplies float16 parts. At exact precision
// x is split into hi + lo parts and must keep float32's accuracy over long
// rows; at fast precision each product is of float16-rounded inputs. Every
// tile shape is held to a float64 reference, on ragged edges, on x
// converted once by tohalf.comp (K % 8 == 0) and in each tile, there in
// 16-byte pieces (K % 4 == 0) or not, and rows past float16's range must
// fall back to float32.
func TestCoopMatMulEveryTileKeepsItsPrecision(t *testing.T) {
	b := backend(t)
	if !vulkan.Coop(b) {
		t.Skip("the device has no cooperative-matrix GEMMs (VK_NV_cooperative_matrix with float16)")
	}
	defer vulkan.ForceCoopTile(b, -1, true)
	cases := []struct {
		typ  gguf.Type
		cols int
	}{{gguf.Q1_0_G128, 4096}, {gguf.TQ2_0_G128, 1024}, {gguf.F16, 1004}, {gguf.F16, 998}, {gguf.Q4_K, 512}}
	for ti, tile := range vulkan.CoopTiles() {
		for _, prec := range []gpu.Precision{gpu.PrecisionExact, gpu.PrecisionFast} {
			for _, c := range cases {
				if prec == gpu.PrecisionExact && c.typ == gguf.Q4_K {
					continue // exact Q4_K products take the portable kernel
				}
				for _, big := range []float32{0, 1e5} {
					t.Run(fmt.Sprintf("%s/%v/%v/K=%d/big=%g", tile, prec, c.typ, c.cols, big), func(t *testing.T) {
						if !vulkan.ForceCoopTile(b, ti, prec == gpu.PrecisionExact) {
							t.Skip("the tile needs more shared memory than the device has")
						}
						r := newRig(t, 7)
						// 130 rows and 300 outputs: full tiles and ragged ones.
						rows, cols, n := 130, c.cols, 300
						xs := r.values(rows*cols, 1)
						if big != 0 {
							// Row 70 leaves float16's range: its tile must be recomputed.
							xs[70*cols+5], xs[70*cols+cols-3] = big, -big
						}
						x := r.tensor("x", xs)
						w := quantized(t, r, "w", n, cols, c.typ)
						wv, err := b.Upload(w)
						require.NoError(t, err)
						ws := make([]float32, n*cols)
						w.Format.Dequantize(ws, w.Data)
						bias := r.values(n, 1)
						bv := r.tensor("bias", bias)
						y := r.zeros("y", rows*n)
						r.vs.SetPrecision(prec)
						r.vs.MatMul(x.v, rows, gpu.Proj{W: wv, Dst: y.v, Bias: bv.v})
						got := make([]float32, rows*n)
						require.NoError(t, r.vs.Read(y.v, 0, got))
						var worst float64
						for m := range rows {
							for j := range n {
								want, mag := float64(bias[j]), math.Abs(float64(bias[j]))
								for k := range cols {
									p := float64(xs[m*cols+k]) * float64(ws[j*cols+k])
									want += p
									mag += math.Abs(p)
								}
								worst = max(worst, math.Abs(float64(got[m*n+j])-want)/mag)
							}
						}
						// Exact: float32 sums of up to 4096 terms, while tensor
						// cores truncate each of the K/16 accumulations rather than
						// round (Fasi et al. 2021, "Numerical behavior of NVIDIA
						// tensor cores"): 1e-5 of sum |x w| covers both. Fast: both
						// inputs rounded to float16 (2^-11 each), so 2^-9.
						bound := 1e-5
						if prec == gpu.PrecisionFast {
							bound = math.Pow(2, -9) // the tile recomputed in float32 is well within it
						}
						require.LessOrEqual(t, worst, bound, "largest error relative to sum |x w|")
					})
				}
			}
		}
	}
}

// BenchmarkCoopTiles times the cooperative GEMM of BenchmarkMatMul's shape
// with every tile shape, for choosing coopTileFor's.
func BenchmarkCoopTiles(b *testing.B) {
	r := newRig(b, 3)
	v := benchBackend(b)
	if !vulkan.Coop(v) {
		b.Skip("no cooperative-matrix GEMMs")
	}
	defer vulkan.ForceCoopTile(v, -1, true)
	const k = 4096
	for _, n := range []int{12288, 1024} { // bonsai-8b's FFN and K/V widths
		for _, typ := range []gguf.Type{gguf.Q1_0_G128, gguf.Q4_K} {
			w, err := v.Upload(quantized(b, r, "w", n, k, typ))
			if err != nil {
				b.Fatal(err)
			}
			for _, rows := range []int{128, 512, 2048} {
				for _, prec := range []gpu.Precision{gpu.PrecisionExact, gpu.PrecisionFast} {
					if typ == gguf.Q4_K && prec == gpu.PrecisionExact {
						continue
					}
					for ti, tile := range vulkan.CoopTiles() {
						b.Run(fmt.Sprintf("n=%d/%v/T=%d/%v/%s", n, typ, rows, prec, tile), func(b *testing.B) {
							if !vulkan.ForceCoopTile(v, ti, prec == gpu.PrecisionExact) {
								b.Skip("too much shared memory")
							}
							timeMatMul(b, r, v, w, rows, n, k, prec)
						})
					}
				}
			}
		}
	}
}

// BenchmarkMatMul times one GEMM of bonsai-8b's FFN shape (x of T rows by
// 4096, W of 12288 rows) on the tiled kernels: cooperative-matrix where the
// device has them, at each precision, and the portable one. Exact products
// of weights not exact in float16 (Q4_K) take the portable kernel whatever
// is asked. It opens its own backend: the shared one validates every call.
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
			for _, kernel := range []string{"coop", "coop-tile-x", "portable"} {
				coop := kernel != "portable"
				if coop && !vulkan.Coop(v) {
					continue
				}
				for _, prec := range []gpu.Precision{gpu.PrecisionExact, gpu.PrecisionFast} {
					b.Run(fmt.Sprintf("%v/T=%d/%s/%v", typ, rows, kernel, prec), func(b *testing.B) {
						old := vulkan.SetCoop(v, coop)
						defer vulkan.SetCoop(v, old)
						// coop-tile-x converts x to float16 in each tile, as before tohalf.comp.
						defer vulkan.SetCoopHalfX(vulkan.SetCoopHalfX(kernel != "coop-tile-x"))
						timeMatMul(b, r, v, w, rows, n, k, prec)
					})
				}
			}
		}
	}
}

// timeMatMul times x[rows][k] times w (n x k) on a fresh stream of v.
func timeMatMul(b *testing.B, r *rig, v *vulkan.Backend, w gpu.Matrix, rows, n, k int, prec gpu.Precision) {
	s := v.NewStream()
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
	b.ResetTimer()
	for range b.N {
		s.MatMul(x, rows, gpu.Proj{W: w, Dst: y})
		if err := s.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(2*float64(rows)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
}
