package vulkan_test

import (
	"fmt"
	"testing"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gpu"
	"github.com/stratalab/strata/gpu/vulkan"
)

// The cooperative-matrix GEMM multiplies float16 parts; splitting x into
// hi + lo parts must keep float32's accuracy over long rows, and rows past
// float16's range must fall back.
func TestCoopMatMulKeepsFloat32AccuracyAndRange(t *testing.T) {
	b := backend(t)
	if !vulkan.Coop(b) {
		t.Skip("the device has no cooperative-matrix GEMMs (VK_NV_cooperative_matrix with float16)")
	}
	for _, typ := range []gguf.Type{gguf.Q1_0_G128, gguf.TQ2_0_G128, gguf.F16} {
		for _, big := range []float32{0, 1e5} {
			t.Run(fmt.Sprintf("%v/big=%g", typ, big), func(t *testing.T) {
				r := newRig(t, 7)
				// 130 rows: two full 64-row tiles and a ragged one; 300
				// outputs: two full 128-wide tiles and a ragged one.
				rows, cols, n := 130, 4096, 300
				xs := r.values(rows*cols, 1)
				if big != 0 {
					// Row 70 leaves float16's range: its tile must be recomputed.
					xs[70*cols+5], xs[70*cols+4000] = big, -big
				}
				x := r.tensor("x", xs)
				wc, wv := r.matrix("w", n, cols, typ)
				bias := r.random("bias", n, 1)
				y := r.zeros("y", rows*n)
				r.cs.MatMul(x.c, rows, gpu.Proj{W: wc, Dst: y.c, Bias: bias.c})
				r.vs.MatMul(x.v, rows, gpu.Proj{W: wv, Dst: y.v, Bias: bias.v})
				c, v := r.read(y)
				// 4096-term sums: float32 on the CPU, while tensor cores
				// truncate each of the K/16 accumulations rather than round
				// (Fasi et al. 2021, "Numerical behavior of NVIDIA tensor
				// cores"). The H200 gave up to 1.9e-5 of the largest value.
				requireClose(t, v, c, 4e-5, "coop matmul")
			})
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
			for _, coop := range []bool{true, false} {
				if coop && !vulkan.Coop(v) {
					continue
				}
				for _, prec := range []gpu.Precision{gpu.PrecisionExact, gpu.PrecisionFast} {
					name := map[bool]string{true: "coop", false: "portable"}[coop]
					b.Run(fmt.Sprintf("%v/T=%d/%s/%v", typ, rows, name, prec), func(b *testing.B) {
						old := vulkan.SetCoop(v, coop)
						defer vulkan.SetCoop(v, old)
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
						b.ReportMetric(2*float64(rows)*n*k*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
					})
				}
			}
		}
	}
}
