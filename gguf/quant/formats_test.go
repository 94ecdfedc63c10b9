package quant_test

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gguf/quant"
)

func mustFor(t testing.TB, typ gguf.Type) *quant.Format {
	t.Helper()
	f, err := quant.For(typ)
	require.NoError(t, err)
	return f
}

func le16(v uint16) []byte { return binary.LittleEndian.AppendUint16(nil, v) }

// checkBlock asserts that packed src decodes exactly to want, and that Dot
// against a ramp matches the float64 dot of want within float32 rounding.
func checkBlock(t *testing.T, typ gguf.Type, src []byte, want []float64) {
	t.Helper()
	f := mustFor(t, typ)
	require.Len(t, src, len(want)/f.BlockSize*f.BlockBytes, "test block size")
	got := make([]float32, len(want))
	f.Dequantize(got, src)
	for i := range want {
		require.Equal(t, want[i], float64(got[i]), "%v element %d", typ, i)
	}
	x := make([]float32, len(want))
	var ref, mag float64
	for i := range x {
		x[i] = float32(i%7) - 2.5
		ref += want[i] * float64(x[i])
		mag += math.Abs(want[i] * float64(x[i]))
	}
	// float32 accumulation over at most a few hundred terms: relative to the
	// sum of |terms| the error stays below depth*2^-24 ~ 300*6e-8.
	assert.InDelta(t, ref, float64(f.Dot(src, x)), 2e-5*mag, "%v Dot", typ)
}

func TestFloatBlocks(t *testing.T) {
	f32 := binary.LittleEndian.AppendUint32(nil, 0x3fc00000) // 1.5
	f32 = binary.LittleEndian.AppendUint32(f32, 0xc0000000)  // -2
	f32 = binary.LittleEndian.AppendUint32(f32, 0x00000001)  // smallest float32 subnormal
	checkBlock(t, gguf.F32, f32, []float64{1.5, -2, math.SmallestNonzeroFloat32})

	var f16 []byte
	for _, h := range []uint16{0x3c00, 0xc000, 0x7bff, 0x0001, 0x3555} {
		f16 = append(f16, le16(h)...)
	}
	checkBlock(t, gguf.F16, f16, []float64{1, -2, 65504, 0x1p-24, 0x1.554p-2})

	var bf16 []byte
	for _, h := range []uint16{0x3f80, 0xc000, 0x3fc0, 0x4049} {
		bf16 = append(bf16, le16(h)...)
	}
	checkBlock(t, gguf.BF16, bf16, []float64{1, -2, 1.5, 0x1.92p1})
}

func TestQ8_0Block(t *testing.T) {
	src := le16(0x3800) // d = 0.5
	want := make([]float64, 32)
	for j := range 32 {
		q := int8(j*8 - 128) // -128 .. 120
		src = append(src, byte(q))
		want[j] = float64(q) * 0.5
	}
	assert.Equal(t, -64.0, want[0])
	checkBlock(t, gguf.Q8_0, src, want)
}

func TestQ4_0Block(t *testing.T) {
	src := le16(0xb400) // d = -0.25
	want := make([]float64, 32)
	for j := range 16 {
		lo, hi := j, 15-j
		src = append(src, byte(lo)|byte(hi)<<4)
		want[j] = float64(lo-8) * -0.25    // low nibbles: elements 0..15
		want[j+16] = float64(hi-8) * -0.25 // high nibbles: elements 16..31
	}
	assert.Equal(t, 2.0, want[0])
	assert.Equal(t, -1.75, want[16])
	checkBlock(t, gguf.Q4_0, src, want)
}

// Scales and mins for the Q4_K/Q5_K blocks below, and their 12-byte packing
// worked out by hand from ggml's quantize_row_q4_K_ref: bytes 0-3 are
// sc[0..3] with sc[4..7]>>4 in the top two bits, bytes 4-7 likewise for the
// mins, bytes 8-11 are sc[4..7]&15 | (m[4..7]&15)<<4.
var (
	kSc     = [8]int{1, 2, 3, 4, 40, 50, 60, 63}
	kMin    = [8]int{5, 6, 7, 8, 33, 17, 48, 63}
	kPacked = []byte{0x81, 0xc2, 0xc3, 0xc4, 0x85, 0x46, 0xc7, 0xc8, 0x18, 0x12, 0x0c, 0xff}
)

// kWant is d*sc*q - dmin*m for weight i of a Q4_K/Q5_K block with d = 0.5,
// dmin = 0.25: weights 64c..64c+31 are sub-block 2c, the next 32 2c+1.
func kWant(i, q int) float64 {
	return 0.5*float64(kSc[i/32]*q) - 0.25*float64(kMin[i/32])
}

func TestQ4_KBlock(t *testing.T) {
	q := func(i int) int { return (i*7 + 3) % 16 }
	src := append(append(le16(0x3800), le16(0x3400)...), kPacked...)
	for c := range 4 {
		for l := range 32 {
			src = append(src, byte(q(64*c+l))|byte(q(64*c+32+l))<<4)
		}
	}
	want := make([]float64, 256)
	for i := range want {
		want[i] = kWant(i, q(i))
	}
	assert.Equal(t, 0.25, want[0])     // 0.5*1*3 - 0.25*5
	assert.Equal(t, 362.25, want[255]) // 0.5*63*12 - 0.25*63
	checkBlock(t, gguf.Q4_K, src, want)
}

func TestQ5_KBlock(t *testing.T) {
	q := func(i int) int { return (i*11 + 5) % 32 }
	src := append(append(le16(0x3800), le16(0x3400)...), kPacked...)
	qh := make([]byte, 32)
	qs := make([]byte, 128)
	for c := range 4 {
		for l := range 32 {
			q0, q1 := q(64*c+l), q(64*c+32+l)
			qs[32*c+l] = byte(q0&15) | byte(q1&15)<<4
			qh[l] |= byte(q0>>4)<<(2*c) | byte(q1>>4)<<(2*c+1)
		}
	}
	src = append(append(src, qh...), qs...)
	want := make([]float64, 256)
	for i := range want {
		want[i] = kWant(i, q(i))
	}
	assert.Equal(t, 1.25, want[0]) // 0.5*1*5 - 0.25*5
	checkBlock(t, gguf.Q5_K, src, want)
}

func TestQ6_KBlock(t *testing.T) {
	q := func(i int) int { return (i*13 + 7) % 64 }
	sc := func(j int) int { return j*15 - 110 } // -110 .. 115, int8
	ql, qh := make([]byte, 128), make([]byte, 64)
	for h := range 2 {
		for l := range 32 {
			e := 128*h + l
			ql[64*h+l] = byte(q(e)&15) | byte(q(e+64)&15)<<4
			ql[64*h+l+32] = byte(q(e+32)&15) | byte(q(e+96)&15)<<4
			qh[32*h+l] = byte(q(e)>>4) | byte(q(e+32)>>4)<<2 | byte(q(e+64)>>4)<<4 | byte(q(e+96)>>4)<<6
		}
	}
	src := append(ql, qh...)
	for j := range 16 {
		src = append(src, byte(int8(sc(j))))
	}
	src = append(src, le16(0x3000)...) // d = 0.125
	want := make([]float64, 256)
	for i := range want {
		want[i] = 0.125 * float64(sc(i/16)*(q(i)-32))
	}
	assert.Equal(t, 343.75, want[0]) // 0.125 * -110 * (7-32)
	checkBlock(t, gguf.Q6_K, src, want)
}

func TestQ1_0Block(t *testing.T) {
	src := le16(0x3000) // d = 0.125
	want := make([]float64, 128)
	for k := range 16 {
		bits := byte(k*37 + 11)
		src = append(src, bits)
		for b := range 8 {
			want[8*k+b] = -0.125
			if bits>>b&1 == 1 {
				want[8*k+b] = 0.125
			}
		}
	}
	// byte 0 is 11 = 0b00001011: weights 0, 1, 3 positive, 2 negative.
	assert.Equal(t, []float64{0.125, 0.125, -0.125, 0.125, -0.125}, want[:5])
	checkBlock(t, gguf.Q1_0_G128, src, want)
}

func TestTQ2_0Block(t *testing.T) {
	code := func(i int) int { return (i*5 + 1) % 4 }
	value := []float64{-1, 0, 1, 0} // code 3 is never written; it reads as 0
	var src []byte
	want := make([]float64, 128)
	for k := range 32 {
		var b byte
		for j := range 4 {
			b |= byte(code(4*k+j)) << (2 * j)
			want[4*k+j] = 0.75 * value[code(4*k+j)]
		}
		src = append(src, b)
	}
	src = append(src, le16(0x3a00)...) // d = 0.75, after the codes
	// byte 0 holds codes 1, 2, 3, 0 from the low bits up.
	assert.Equal(t, byte(0b00111001), src[0])
	assert.Equal(t, []float64{0, 0.75, 0, -0.75}, want[:4])
	checkBlock(t, gguf.TQ2_0_G128, src, want)
}

func TestForAndSupported(t *testing.T) {
	want := []gguf.Type{gguf.F32, gguf.F16, gguf.Q4_0, gguf.Q8_0, gguf.Q4_K, gguf.Q5_K,
		gguf.Q6_K, gguf.BF16, gguf.Q1_0_G128, gguf.TQ2_0_G128}
	assert.Equal(t, want, quant.Supported())
	for _, typ := range want {
		f := mustFor(t, typ)
		info, ok := typ.Info()
		require.True(t, ok)
		assert.Equal(t, typ, f.Type)
		assert.Equal(t, info.BlockSize, f.BlockSize, "%v block size", typ)
		assert.Equal(t, info.BlockBytes, f.BlockBytes, "%v block bytes", typ)
	}

	_, err := quant.For(gguf.Q2_K)
	assert.EqualError(t, err, "quant: tensor type Q2_K is not supported (supported: F32, F16, Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, BF16, Q1_0_g128, TQ2_0_g128)")
	_, err = quant.For(gguf.Type(99))
	assert.ErrorContains(t, err, "tensor type type(99) is not supported")

	f := mustFor(t, gguf.Q8_0)
	f.BlockSize = 7
	assert.Equal(t, 32, mustFor(t, gguf.Q8_0).BlockSize, "For must hand out copies")
}

func TestContractViolationsPanicClearly(t *testing.T) {
	f := mustFor(t, gguf.Q4_K)
	assert.PanicsWithValue(t, "quant: Q4_K row of 100 elements is not a whole number of 256-element blocks", func() {
		f.Dot(make([]byte, 144), make([]float32, 100))
	})
	assert.PanicsWithValue(t, "quant: Q4_K row of 512 elements needs 288 packed bytes, got 144", func() {
		f.Dequantize(make([]float32, 512), make([]byte, 144))
	})
	assert.PanicsWithValue(t, "quant: Q8_0 row of 64 elements needs 68 packed bytes, got 34", func() {
		mustFor(t, gguf.Q8_0).Quantize(make([]byte, 34), make([]float32, 64))
	})
}
