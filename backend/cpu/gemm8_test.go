package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/cpu"

	"github.com/stratalab/strata/backend"
	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gguf/quant"
	"github.com/stratalab/strata/model"
)

// The int8 GEMM (fast precision) against float64, for every integer format,
// fused projections of two formats with and without a bias, ragged rows and
// outputs. Two checks per output:
//   - the kernel: against the float64 product of the same int8 x (rounded
//     here as the backend rounds it: steps of max|x|/127 per row and code
//     block, to nearest even) with the decoded weights. The int32 sums
//     are exact; what is left is float32 rounding in scaling and adding the
//     blocks, a few units of 2^-24 per block of sum |products|.
//   - the precision: against the float64 product of x itself. Each x moves
//     by at most half its block's step, so the error is at most
//     sum_k step(k)/2 |w_k| (plus the rounding above).
//
// And a row gives the same bits multiplied with other rows.
func TestInt8GEMMIsTheProductsOfInt8X(t *testing.T) {
	eachInt8Kernel(t, testInt8Products)
}

func testInt8Products(t *testing.T, avx2 bool) {
	r := rand.New(rand.NewPCG(11, 12))
	b := New(2)
	pairs := []struct {
		types [2]gguf.Type
		cols  int // 800: the weights interleave in 16 steps of 4 k, and 8 more
	}{
		{[2]gguf.Type{gguf.Q8_0, gguf.Q4_0}, 800}, {[2]gguf.Type{gguf.Q4_K, gguf.Q6_K}, 768},
		{[2]gguf.Type{gguf.Q5_K, gguf.Q8_0}, 768}, {[2]gguf.Type{gguf.Q1_0_G128, gguf.TQ2_0_G128}, 768},
		{[2]gguf.Type{gguf.Q4_0, gguf.Q5_K}, 768},
	}
	for _, pc := range pairs {
		pair, cols := pc.types, pc.cols
		for _, rows := range []int{9, 13, 50} {
			t.Run(fmt.Sprintf("%v+%v/k=%d/rows=%d", pair[0], pair[1], cols, rows), func(t *testing.T) {
				st := b.NewStream()
				st.SetPrecision(backend.PrecisionFast)
				var projs []backend.Proj
				var ws, biases [][]float32
				for pi, n := range []int{45, 32} {
					f, err := quant.For(pair[pi])
					require.NoError(t, err)
					src := make([]float32, n*cols)
					for i := range src {
						src[i] = float32(r.NormFloat64())
					}
					rb, err := f.Type.RowBytes(int64(cols))
					require.NoError(t, err)
					raw := make([]byte, int(rb)*n)
					for i := range n {
						f.Quantize(raw[i*int(rb):(i+1)*int(rb)], src[i*cols:(i+1)*cols])
					}
					if pair[pi] == gguf.Q8_0 { // -128: Quantize never writes it, a file may hold it
						for blk := 0; blk < len(raw); blk += 3 * 34 {
							raw[blk+2+5] = 0x80
						}
					}
					f.Dequantize(src, raw)
					m, err := b.Upload(&model.Weight{Name: fmt.Sprintf("w%d", pi), Rows: n, Cols: cols, Format: f, Data: raw})
					require.NoError(t, err)
					y, err := st.Alloc("y", rows*n)
					require.NoError(t, err)
					p := backend.Proj{W: m, Dst: y}
					var bias []float32
					if pi == 0 {
						bias = make([]float32, n)
						for i := range bias {
							bias[i] = float32(r.NormFloat64())
						}
						p.Bias = sliceOf(t, st, bias)
					}
					projs, ws, biases = append(projs, p), append(ws, src), append(biases, bias)
				}
				xs := make([]float32, rows*cols)
				for i := range xs {
					xs[i] = float32(r.NormFloat64() * math.Exp(r.NormFloat64())) // outliers, as activations have
				}
				st.MatMul(sliceOf(t, st, xs), rows, projs...)
				for pi, p := range projs {
					m := p.W.(*matrix)
					block, n := m.w.Format.CodeBlock, m.w.Rows
					got := make([]float32, rows*n)
					require.NoError(t, st.Read(p.Dst, 0, got))
					for tk := range rows {
						xr := xs[tk*cols : (tk+1)*cols]
						for j := range n {
							w := ws[pi][j*cols : (j+1)*cols]
							var exact, quantized, mag, moved float64
							for b0 := 0; b0 < cols; b0 += block {
								var amax float32
								for _, v := range xr[b0 : b0+block] {
									amax = max(amax, float32(math.Abs(float64(v))))
								}
								step := float64(amax) / 127
								var qsum float64
								for k := b0; k < b0+block; k++ {
									exact += float64(xr[k]) * float64(w[k])
									q := 0.0
									if amax > 0 {
										q = math.RoundToEven(float64(xr[k] * (127 / amax)))
									}
									qsum += q * float64(w[k])
									mag += math.Abs(q * step * float64(w[k]))
									moved += step / 2 * math.Abs(float64(w[k]))
								}
								quantized += step * qsum
							}
							if biases[pi] != nil {
								exact += float64(biases[pi][j])
								quantized += float64(biases[pi][j])
								mag += math.Abs(float64(biases[pi][j]))
							}
							rounding := float64(8*(cols/block)+8) * math.Pow(2, -24) * mag
							v := float64(got[tk*n+j])
							require.InDelta(t, quantized, v, rounding, "%v row %d output %d: against int8 x", m.w.Format.Type, tk, j)
							require.InDelta(t, exact, v, moved+rounding, "%v row %d output %d: against x", m.w.Format.Type, tk, j)
						}
					}
					// The last 9 rows alone (still the int8 kernel) give the same bits.
					sub := p
					y9, err := st.Alloc("y9", 9*n)
					require.NoError(t, err)
					sub.Dst = y9
					st.MatMul(sliceOf(t, st, xs[(rows-9)*cols:]), 9, sub)
					alone := make([]float32, 9*n)
					require.NoError(t, st.Read(y9, 0, alone))
					require.Equal(t, got[(rows-9)*n:], alone, "the last 9 rows multiplied apart")
				}
				require.NoError(t, st.Sync())
			})
		}
	}
}

// BenchmarkInt8Kernel runs the int8 kernels alone on data in cache: 32
// weight rows by 6 rows of x over k = 2048 in blocks of 32 or 128, codes a
// byte each (gemmI8x32x6) or two a byte (gemmI4x32x6), or a byte each in
// four calls of the AVX2 kernel (six of its Q8_0 kernel).
func BenchmarkInt8Kernel(b *testing.B) {
	if !hasInt8GEMM() {
		b.Skip("no AVX-512 VNNI")
	}
	const cols = 2048
	for _, kernel := range []struct {
		name string
		fn   func(w *byte, wsc *float32, x *int8, ldx int, xsc *float32, ldxsc, blocks, steps int, out *[192]float32)
	}{{"bytes", gemmI8x32x6}, {"nibbles", gemmI4x32x6}, {"avx2", avx2Bytes}, {"avx2-q8_0", avx2Q8}} {
		if strings.HasPrefix(kernel.name, "avx2") && !(cpu.X86.HasAVX2 && cpu.X86.HasFMA) {
			continue
		}
		for _, block := range []int{32, 128} {
			b.Run(fmt.Sprintf("%s/block=%d", kernel.name, block), func(b *testing.B) {
				nb := cols / block
				w, x := make([]byte, i8Rows*cols), make([]int8, i8XRows*cols)
				wsc, xsc := make([]float32, nb*2*i8Rows), make([]float32, nb*i8XRows*2)
				var tile [i8XRows * i8Rows]float32
				for b.Loop() {
					kernel.fn(&w[0], &wsc[0], &x[0], cols, &xsc[0], i8XRows*8, nb, block/4, &tile)
				}
				b.ReportMetric(float64(i8Rows*i8XRows*cols)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
		}
	}
}

// avx2Bytes is gemmI8x32x6 made of gemmI8x16x3AVX2, as avx2Tile calls it.
func avx2Bytes(w *byte, wsc *float32, x *int8, ldx int, xsc *float32, ldxsc, blocks, steps int, out *[192]float32) {
	ws, xs := unsafe.Slice(w, 128), unsafe.Slice(x, 4*ldx)
	wscs, xscs := unsafe.Slice(wsc, 32), unsafe.Slice(xsc, 8)
	for xr := 0; xr < i8XRows; xr += 3 {
		for h := range 2 {
			gemmI8x16x3AVX2(&ws[64*h], &wscs[16*h], &xs[xr*ldx], ldx, &xscs[2*xr], ldxsc, blocks, steps, 128, &out[xr*i8Rows+16*h])
		}
	}
}

// avx2Q8 is gemmI8x32x6 for Q8_0 made of gemmQ8x16x2AVX2, as avx2Tile calls it.
func avx2Q8(w *byte, wsc *float32, x *int8, ldx int, xsc *float32, ldxsc, blocks, steps int, out *[192]float32) {
	ws, xs := unsafe.Slice(w, 128), unsafe.Slice(x, 5*ldx)
	wscs, xscs := unsafe.Slice(wsc, 32), unsafe.Slice(xsc, 10)
	for xr := 0; xr < i8XRows; xr += 2 {
		for h := range 2 {
			gemmQ8x16x2AVX2(&ws[64*h], &wscs[16*h], &xs[xr*ldx], ldx, &xscs[2*xr], ldxsc, blocks, steps, 128, &out[xr*i8Rows+16*h])
		}
	}
}

// A NaN anywhere in a block of x makes that row's int8 products NaN, as
// in float32, not a large finite number; the other rows stay finite.
func TestInt8GEMMKeepsNaN(t *testing.T) {
	eachInt8Kernel(t, func(t *testing.T, avx2 bool) {
		for _, typ := range []gguf.Type{gguf.Q8_0, gguf.Q4_0} {
			testInt8NaN(t, typ)
		}
	})
}

func testInt8NaN(t *testing.T, typ gguf.Type) {
	f, err := quant.For(typ)
	require.NoError(t, err)
	const rows, cols, n = 9, 64, 32
	w := make([]float32, n*cols)
	for i := range w {
		w[i] = float32(i%7) - 3
	}
	raw := make([]byte, n*cols/f.BlockSize*f.BlockBytes)
	f.Quantize(raw, w)
	b := New(2)
	m, err := b.Upload(&model.Weight{Name: "w", Rows: n, Cols: cols, Format: f, Data: raw})
	require.NoError(t, err)
	st := b.NewStream()
	st.SetPrecision(backend.PrecisionFast)
	for _, at := range []int{0, 31} { // the first and the last 16 of a block
		xs := make([]float32, rows*cols)
		for i := range xs {
			xs[i] = 1
		}
		xs[at] = float32(math.NaN())
		y, err := st.Alloc("y", rows*n)
		require.NoError(t, err)
		st.MatMul(sliceOf(t, st, xs), rows, backend.Proj{W: m, Dst: y})
		got := make([]float32, rows*n)
		require.NoError(t, st.Read(y, 0, got))
		for j, v := range got {
			require.Equal(t, j < n, math.IsNaN(float64(v)), "NaN at %d: output %d is %g", at, j, v)
		}
	}
	require.NoError(t, st.Sync())
}

// Streams of one backend multiplying a weight for the first time together
// (each would pack it) get the bits one stream gets alone, and the weight
// is packed once.
func TestInt8GEMMPacksOnceAcrossStreams(t *testing.T) {
	eachInt8Kernel(t, testPacksOnce)
}

func testPacksOnce(t *testing.T, avx2 bool) {
	r := rand.New(rand.NewPCG(3, 4))
	const rows, cols, n = 20, 512, 70
	for _, typ := range []gguf.Type{gguf.Q8_0, gguf.Q4_0, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K} {
		t.Run(typ.String(), func(t *testing.T) {
			f, err := quant.For(typ)
			require.NoError(t, err)
			src := make([]float32, n*cols)
			for i := range src {
				src[i] = float32(r.NormFloat64())
			}
			raw := make([]byte, n*cols/f.BlockSize*f.BlockBytes)
			f.Quantize(raw, src)
			xs := make([]float32, rows*cols)
			for i := range xs {
				xs[i] = float32(r.NormFloat64())
			}
			product := func(b *Backend, m backend.Matrix) ([]float32, error) {
				st := b.NewStream()
				st.SetPrecision(backend.PrecisionFast)
				y, err := st.Alloc("y", rows*n)
				if err != nil {
					return nil, err
				}
				x, err := st.Alloc("x", rows*cols)
				if err != nil {
					return nil, err
				}
				st.Write(x, 0, xs)
				st.MatMul(x, rows, backend.Proj{W: m, Dst: y})
				got := make([]float32, rows*n)
				return got, st.Read(y, 0, got)
			}
			upload := func(b *Backend) backend.Matrix {
				m, err := b.Upload(&model.Weight{Name: "w", Rows: n, Cols: cols, Format: f, Data: raw})
				require.NoError(t, err)
				return m
			}
			alone := New(2)
			want, err := product(alone, upload(alone))
			require.NoError(t, err)
			b := New(2)
			m := upload(b)
			results, errs := make([][]float32, 4), make([]error, 4)
			var wg sync.WaitGroup
			for i := range results {
				wg.Go(func() { results[i], errs[i] = product(b, m) })
			}
			wg.Wait()
			for i, got := range results {
				require.NoError(t, errs[i])
				require.Equal(t, want, got, "stream %d", i)
			}
			require.NotNil(t, m.(*matrix).int8, "the weight is kept packed")
		})
	}
}

// eachInt8Kernel runs fn with each int8 GEMM this CPU can run: AVX-512
// VNNI, and AVX2 with the transposes and x's rounding in Go, as on a CPU
// without AVX-512.
func eachInt8Kernel(t *testing.T, fn func(t *testing.T, avx2 bool)) {
	ran := false
	if hasVNNI {
		t.Run("vnni", func(t *testing.T) { fn(t, false) })
		ran = true
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		t.Run("avx2", func(t *testing.T) {
			vnni, avx2, interleave := hasVNNI, int8AVX2, hasInterleave16
			hasVNNI, int8AVX2, hasInterleave16 = false, true, false
			t.Cleanup(func() { hasVNNI, int8AVX2, hasInterleave16 = vnni, avx2, interleave })
			fn(t, true)
		})
		ran = true
	}
	if !ran {
		t.Skip("this CPU has neither AVX-512 VNNI nor AVX2 (or is not amd64): the int8 GEMM is not used")
	}
}

// quantizeRowGo, x's rounding on CPUs without AVX-512, gives quantizeRow's
// bytes and scales bit for bit, in blocks with outliers, of zeros and of
// ties; a block with a NaN gets a NaN step from both.
func TestQuantizeRowGoIsQuantizeRow(t *testing.T) {
	if !hasInterleave16 {
		t.Skip("quantizeRow is AVX-512 code")
	}
	r := rand.New(rand.NewPCG(7, 8))
	for _, block := range []int{16, 32, 128} {
		const blocks = 6
		x := make([]float32, blocks*block)
		for i := range x {
			x[i] = float32(r.NormFloat64() * math.Exp(3*r.NormFloat64()))
		}
		clear(x[block : 2*block])
		x[2*block+5] = float32(math.NaN())
		for i := range block { // steps of 1: every other value a tie, to even
			x[4*block+i] = float32(i%8) - 3.5
		}
		x[4*block] = 127
		want, got := make([]int8, len(x)), make([]int8, len(x))
		wsc, gsc := make([]float32, 2*blocks), make([]float32, 2*blocks)
		quantizeRow(&x[0], &want[0], &wsc[0], 8, blocks, block)
		quantizeRowGo(x, got, gsc, 2, block)
		for b := range blocks {
			if b == 2 { // the NaN's block: its bytes are moot, its step NaN
				require.True(t, math.IsNaN(float64(wsc[2*b])) && math.IsNaN(float64(gsc[2*b])), "block %d: NaN step", block)
				continue
			}
			require.Equal(t, want[b*block:(b+1)*block], got[b*block:(b+1)*block], "block %d: bytes of block %d", block, b)
			for i := 2 * b; i < 2*b+2; i++ {
				require.Equal(t, math.Float32bits(wsc[i]), math.Float32bits(gsc[i]), "block %d: scale %d (%g, %g)", block, i, wsc[i], gsc[i])
			}
		}
	}
}
