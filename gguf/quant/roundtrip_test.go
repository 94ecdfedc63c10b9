package quant_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/x448/float16"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gguf/quant"
)

// weights returns n normal values whose scale changes every 64 (from 1e-3
// to 10) with an occasional large outlier, as real weight rows have.
func weights(rng *rand.Rand, n int) []float32 {
	w := make([]float32, n)
	scale := 1.0
	for i := range w {
		if i%64 == 0 {
			scale = math.Pow(10, rng.Float64()*4-3)
		}
		w[i] = float32(rng.NormFloat64() * scale)
		if rng.IntN(500) == 0 {
			w[i] *= 20
		}
	}
	return w
}

func quantize(t testing.TB, f *quant.Format, src []float32) []byte {
	t.Helper()
	size, err := f.Type.RowBytes(int64(len(src)))
	require.NoError(t, err)
	dst := make([]byte, size)
	f.Quantize(dst, src)
	return dst
}

func half(b []byte) float64 {
	return float64(float16.Frombits(binary.LittleEndian.Uint16(b)).Float32())
}

func TestDotMatchesDequantizedFloat64(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 1024
	for _, typ := range quant.Supported() {
		t.Run(typ.String(), func(t *testing.T) {
			f := mustFor(t, typ)
			w := quantize(t, f, weights(rng, n))
			deq := make([]float32, n)
			f.Dequantize(deq, w)
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			var ref, mag float64
			for i := range x {
				ref += float64(deq[i]) * float64(x[i])
				mag += math.Abs(float64(deq[i]) * float64(x[i]))
			}
			require.Positive(t, mag)
			// float32 accumulation: error below (summation depth)*2^-24 of the
			// sum of |terms|; the deepest chain (F32, 4 running sums over
			// 1024 terms) is ~260 adds, so 2e-5 bounds every format.
			assert.InDelta(t, ref, float64(f.Dot(w, x)), 2e-5*mag)
		})
	}
}

// roundTrip quantizes random weights with f and returns them with their
// decoded values and packed bytes.
func roundTrip(t *testing.T, typ gguf.Type, n int) (x, deq []float32, packed []byte) {
	f := mustFor(t, typ)
	x = weights(rand.New(rand.NewPCG(3, uint64(typ))), n)
	packed = quantize(t, f, x)
	deq = make([]float32, n)
	f.Dequantize(deq, packed)
	return x, deq, packed
}

func absmax(xs []float32) float64 {
	m := 0.0
	for _, v := range xs {
		m = max(m, math.Abs(float64(v)))
	}
	return m
}

func TestRoundTripFloats(t *testing.T) {
	x, deq, _ := roundTrip(t, gguf.F32, 512)
	assert.Equal(t, x, deq)

	x, deq, _ = roundTrip(t, gguf.F16, 512)
	for i := range x {
		require.Equal(t, float16.Fromfloat32(x[i]).Float32(), deq[i], "element %d", i)
		if math.Abs(float64(x[i])) >= 0x1p-14 { // normal range: half an ulp of 2^-10
			require.LessOrEqual(t, math.Abs(float64(x[i]-deq[i])), 0x1p-11*math.Abs(float64(x[i])))
		}
	}

	x, deq, _ = roundTrip(t, gguf.BF16, 512)
	for i := range x { // half an ulp of an 8-bit significand
		require.LessOrEqual(t, math.Abs(float64(x[i]-deq[i])), 0x1p-8*math.Abs(float64(x[i])), "element %d", i)
	}
}

func TestRoundTripQ8_0(t *testing.T) {
	x, deq, packed := roundTrip(t, gguf.Q8_0, 4096)
	for b := range len(x) / 32 {
		d := absmax(x[32*b:32*b+32]) / 127
		dh := half(packed[34*b:])
		// round-to-nearest leaves d/2; storing d as f16 moves each of the up
		// to 127 steps by |d-dh|; 1e-6*d covers float32 arithmetic.
		bound := d/2 + 127*math.Abs(d-dh) + 1e-6*d
		for i := 32 * b; i < 32*b+32; i++ {
			require.LessOrEqual(t, math.Abs(float64(x[i]-deq[i])), bound, "element %d", i)
		}
	}
}

func TestQuantizeQ8_0ByHand(t *testing.T) {
	x := make([]float32, 32)
	// d = 31.75/127 = 0.25 (f16 0x3400); quants 127, 1.5 -> 2, -1.5 -> -2 and
	// 0.5 -> 1, as C's roundf rounds ties away from zero.
	x[0], x[1], x[2], x[3] = 31.75, 0.375, -0.375, 0.125
	want := append([]byte{0x00, 0x34, 127, 2, 0xfe, 1}, make([]byte, 28)...)
	assert.Equal(t, want, quantize(t, mustFor(t, gguf.Q8_0), x))
}

func TestRoundTripQ4_0(t *testing.T) {
	x, deq, packed := roundTrip(t, gguf.Q4_0, 4096)
	for b := range len(x) / 32 {
		d := absmax(x[32*b:32*b+32]) / 8
		dh := math.Abs(half(packed[18*b:]))
		// the far end of the range (+8 steps) is clipped to +7: one step;
		// f16 storage moves the up to 8 steps by |d-dh|.
		bound := d + 8*math.Abs(d-dh) + 1e-6*d
		for i := 32 * b; i < 32*b+32; i++ {
			require.LessOrEqual(t, math.Abs(float64(x[i]-deq[i])), bound, "element %d", i)
		}
	}
}

// Matches llama.cpp's quantize_row_q4_0_ref, worked through by hand.
func TestQuantizeQ4_0ByHand(t *testing.T) {
	x := make([]float32, 32)
	x[0], x[1], x[2], x[3], x[16] = -4, 4, 1.3, 3.9, -1.1
	// The first largest magnitude, -4, sets d = -4/-8 = 0.5 (f16 0x3800).
	// q = min(15, floor(x/d + 8.5)): -4 -> 0, 4 -> 15, 1.3 -> 11, 3.9 -> 15,
	// 0 -> 8, -1.1 -> 6. Byte j is q[j] | q[j+16]<<4.
	want := []byte{0x00, 0x38, 0x60, 0x8f, 0x8b, 0x8f}
	for range 12 {
		want = append(want, 0x88)
	}
	assert.Equal(t, want, quantize(t, mustFor(t, gguf.Q4_0), x))
}

// K-quant bounds: the quantizers round scales up so that no weight clips;
// each is then within half a step of its sub-block.
func TestRoundTripKQuants(t *testing.T) {
	for _, c := range []struct {
		typ  gguf.Type
		nmax float64
	}{{gguf.Q4_K, 15}, {gguf.Q5_K, 31}} {
		t.Run(c.typ.String(), func(t *testing.T) {
			x, deq, packed := roundTrip(t, c.typ, 4096)
			bb := mustFor(t, c.typ).BlockBytes
			var sq, sqErr float64
			for b := range len(x) / 256 {
				d, dmin := half(packed[bb*b:]), half(packed[bb*b+2:])
				for j := range 8 {
					sub := x[256*b+32*j : 256*b+32*j+32]
					lo, hi := 0.0, math.Inf(-1)
					for _, v := range sub {
						lo, hi = min(lo, float64(v)), max(hi, float64(v))
					}
					// step = d*sc <= span/nmax + d, span <= hi - lo + dmin
					// (scale and min each rounded up by < one unit).
					bound := ((hi-lo+dmin)/c.nmax+d)/2 + 1e-5*(hi-lo)
					for i := range sub {
						e := float64(x[256*b+32*j+i] - deq[256*b+32*j+i])
						require.LessOrEqual(t, math.Abs(e), bound, "block %d sub-block %d element %d", b, j, i)
						sq += float64(sub[i]) * float64(sub[i])
						sqErr += e * e
					}
				}
			}
			t.Logf("%v relative RMS error %.4f", c.typ, math.Sqrt(sqErr/sq))
		})
	}
	t.Run("Q6_K", func(t *testing.T) {
		x, deq, packed := roundTrip(t, gguf.Q6_K, 4096)
		for b := range len(x) / 256 {
			d := half(packed[210*b+208:])
			for j := range 16 {
				sub := x[256*b+16*j : 256*b+16*j+16]
				a := absmax(sub)
				// step = d*sc <= absmax/31 + d; weights stay within +-31 steps.
				bound := (a/31+d)/2 + 1e-5*a
				for i := range sub {
					require.LessOrEqual(t, math.Abs(float64(sub[i]-deq[256*b+16*j+i])), bound, "block %d sub-block %d", b, j)
				}
			}
		}
	})
}

func TestRoundTripQ1_0(t *testing.T) {
	x, deq, _ := roundTrip(t, gguf.Q1_0_G128, 1024)
	for b := range len(x) / 128 {
		var sum float64
		for _, v := range x[128*b : 128*b+128] {
			sum += math.Abs(float64(v))
		}
		d := float16.Fromfloat32(float32(sum / 128)).Float32()
		for i := 128 * b; i < 128*b+128; i++ {
			want := d
			if x[i] < 0 {
				want = -d
			}
			require.Equal(t, want, deq[i], "element %d", i)
		}
	}
}

func TestRoundTripTQ2_0(t *testing.T) {
	x, deq, _ := roundTrip(t, gguf.TQ2_0_G128, 1024)
	zeros := 0
	for b := range len(x) / 128 {
		a := float32(absmax(x[128*b : 128*b+128]))
		dh := float16.Fromfloat32(a).Float32()
		for i := 128 * b; i < 128*b+128; i++ {
			switch {
			case float32(math.Abs(float64(x[i]))) < a/2:
				require.Zero(t, deq[i], "element %d: |w| < d/2 must quantize to 0", i)
				zeros++
			case x[i] > 0:
				require.Equal(t, dh, deq[i], "element %d", i)
			default:
				require.Equal(t, -dh, deq[i], "element %d", i)
			}
		}
	}
	assert.Greater(t, zeros, len(x)/2, "normal weights are mostly under absmax/2")
}

func TestQuantizeZeros(t *testing.T) {
	for _, typ := range quant.Supported() {
		f := mustFor(t, typ)
		n := 256
		deq := make([]float32, n)
		for i := range deq {
			deq[i] = float32(math.NaN())
		}
		f.Dequantize(deq, quantize(t, f, make([]float32, n)))
		for i, v := range deq {
			require.Zero(t, v, fmt.Sprintf("%v element %d of an all-zero row", typ, i))
		}
	}
}

func TestQuantizeQ1_0ByHand(t *testing.T) {
	x := make([]float32, 128)
	x[0], x[1], x[3], x[4] = 1, -3, float32(math.Copysign(0, -1)), 2
	// mean |w| = 6/128 = 0.046875 = f16 0x2a00; w >= 0 sets the bit, so
	// only weight 1 is clear (-0 >= 0 holds).
	want := []byte{0x00, 0x2a, 0xfd}
	for range 15 {
		want = append(want, 0xff)
	}
	assert.Equal(t, want, quantize(t, mustFor(t, gguf.Q1_0_G128), x))
}

func TestQuantizeTQ2_0ByHand(t *testing.T) {
	x := make([]float32, 128)
	x[0], x[1], x[2], x[3], x[4] = 1, 0.5, 0.4999, -0.5, -1
	// d = absmax = 1. Codes (0 = -1, 1 = 0, 2 = +1): |w| < d/2 is 0, so
	// 1 -> 2, 0.5 -> 2, 0.4999 -> 1, -0.5 -> 0, -1 -> 0, zeros -> 1.
	want := []byte{0b00_01_10_10, 0b01_01_01_00}
	for range 30 {
		want = append(want, 0x55)
	}
	want = append(want, 0x00, 0x3c)
	assert.Equal(t, want, quantize(t, mustFor(t, gguf.TQ2_0_G128), x))
}

// Quantize must set every byte of dst, whatever dst held before.
func TestQuantizeOverwritesDst(t *testing.T) {
	src := weights(rand.New(rand.NewPCG(15, 16)), 512)
	for _, typ := range quant.Supported() {
		f := mustFor(t, typ)
		clean := quantize(t, f, src)
		dirty := make([]byte, len(clean))
		for i := range dirty {
			dirty[i] = 0xa5
		}
		f.Quantize(dirty, src)
		assert.Equal(t, clean, dirty, "%v", typ)
	}
}
