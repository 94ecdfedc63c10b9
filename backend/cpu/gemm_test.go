package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gguf/quant"
	"github.com/stratalab/strata/internal/enginetest"
	"github.com/stratalab/strata/model"
)

// The AVX-512 GEMM against float64 sums, on ragged shapes: rows of x around
// its 16- and 32-row blocks and the matrix-vector path (gemvRows or fewer),
// outputs around its 12-row kernel, 48-row and 64-row groups, k around its
// 256-step blocks and 16-wide transposes, fused projections with and
// without a bias. Each output is a float32 sum in k order, 256 terms at a time,
// then the blocks' sums: to first order its error is at most (256 + blocks)
// units of float32 rounding (2^-24) of sum |products|. And every row comes
// out the same, bit for bit, multiplied alone.
func TestGEMMIsTheProductsWhateverTheRows(t *testing.T) {
	if !hasPanelGEMM {
		t.Skip("this CPU has no AVX-512 (or is not amd64): the GEMM kernels are not used")
	}
	r := rand.New(rand.NewPCG(9, 10))
	b := New(2)
	for _, typ := range []gguf.Type{gguf.F32, gguf.Q8_0} {
		for _, cols := range []int{32, 44, 288, 800, 1024} { // 1024: rows read at a padded stride
			if typ != gguf.F32 && cols%32 != 0 {
				continue // whole blocks only; F32 covers k not a multiple of 16
			}
			for _, rows := range []int{1, 3, 5, 16, 17, 32, 33, 50, 130} { // 130: float32 weights copied to that stride
				t.Run(fmt.Sprintf("%v/k=%d/rows=%d", typ, cols, rows), func(t *testing.T) {
					f, err := quant.For(typ)
					require.NoError(t, err)
					var projs []backend.Proj
					var ws [][]float32
					var biases [][]float32
					st := b.NewStream()
					for pi, n := range []int{13, 100, 12} {
						src := make([]float32, n*cols)
						for i := range src {
							src[i] = float32(r.NormFloat64())
						}
						rb, err := typ.RowBytes(int64(cols))
						require.NoError(t, err)
						raw := make([]byte, int(rb)*n)
						for i := range n {
							f.Quantize(raw[i*int(rb):(i+1)*int(rb)], src[i*cols:(i+1)*cols])
						}
						f.Dequantize(src, raw)
						m, err := b.Upload(&model.Weight{Name: fmt.Sprintf("w%d", pi), Rows: n, Cols: cols, Format: f, Data: raw})
						require.NoError(t, err)
						y, err := st.Alloc("y", rows*n)
						require.NoError(t, err)
						p := backend.Proj{W: m, Dst: y}
						var bias []float32
						if pi != 1 {
							bias = make([]float32, n)
							for i := range bias {
								bias[i] = float32(r.NormFloat64())
							}
							bt, err := st.Alloc("bias", n)
							require.NoError(t, err)
							st.Write(bt, 0, bias)
							p.Bias = bt
						}
						projs, ws, biases = append(projs, p), append(ws, src), append(biases, bias)
					}
					xs := make([]float32, rows*cols)
					for i := range xs {
						xs[i] = float32(r.NormFloat64())
					}
					x, err := st.Alloc("x", rows*cols)
					require.NoError(t, err)
					st.Write(x, 0, xs)
					st.MatMul(x, rows, projs...)
					bound := float64(256+(cols+255)/256) * math.Pow(2, -24)
					for pi, p := range projs {
						n := p.W.Rows()
						got := make([]float32, rows*n)
						require.NoError(t, st.Read(p.Dst, 0, got))
						for tk := range rows {
							for j := range n {
								want, mag := 0.0, 0.0
								if biases[pi] != nil {
									want, mag = float64(biases[pi][j]), math.Abs(float64(biases[pi][j]))
								}
								for k := range cols {
									v := float64(xs[tk*cols+k]) * float64(ws[pi][j*cols+k])
									want += v
									mag += math.Abs(v)
								}
								require.InDelta(t, want, float64(got[tk*n+j]), bound*mag, "projection %d, row %d, output %d", pi, tk, j)
							}
						}
						// Each row alone gives the same bits.
						for _, tk := range []int{0, rows - 1} {
							st.MatMul(backend.Tensor(sliceOf(t, st, xs[tk*cols:(tk+1)*cols])), 1, p)
							alone := make([]float32, n)
							require.NoError(t, st.Read(p.Dst, 0, alone))
							enginetest.RequireBits(t, alone, got[tk*n:(tk+1)*n], "row %d alone", tk)
						}
					}
					require.NoError(t, st.Sync())
				})
			}
		}
	}
}

// sliceOf is a new tensor holding v.
func sliceOf(t *testing.T, st backend.Stream, v []float32) backend.Tensor {
	x, err := st.Alloc("row", len(v))
	require.NoError(t, err)
	st.Write(x, 0, v)
	return x
}

// BenchmarkFloatKernel runs gemm32x12 alone on data in cache (k = 256).
func BenchmarkFloatKernel(b *testing.B) {
	if !hasPanelGEMM {
		b.Skip("no AVX-512")
	}
	const k = 256
	xt, w := make([]float32, 32*k), make([]float32, 12*k)
	var tile [384]float32
	for b.Loop() {
		gemm32x12(&xt[0], &w[0], k, k, &tile)
	}
	b.ReportMetric(2*float64(32*12*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
