package quant

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHalfToFloatKnownPatterns(t *testing.T) {
	cases := []struct {
		bits uint16
		want float32
	}{
		{0x3c00, 1},
		{0xc000, -2},
		{0x7bff, 65504},
		{0x0001, 0x1p-24},        // smallest subnormal
		{0x03ff, 1023 * 0x1p-24}, // largest subnormal
		{0x0400, 0x1p-14},        // smallest normal
		{0x3555, 0x1.554p-2},     // 1/3 rounded: mantissa 0x155
		{0x0000, 0},
		{0x7c00, float32(math.Inf(1))},
		{0xfc00, float32(math.Inf(-1))},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, halfToFloat(c.bits), "bits %#04x", c.bits)
	}
	assert.True(t, math.Signbit(float64(halfToFloat(0x8000))), "0x8000 is -0")
	assert.True(t, math.IsNaN(float64(halfToFloat(0x7e00))))
	assert.True(t, math.IsNaN(float64(halfToFloat(0xfc01))))
}

func TestFloatToHalfRoundsToNearestEven(t *testing.T) {
	cases := []struct {
		f    float32
		want uint16
	}{
		{1, 0x3c00},
		{-2, 0xc000},
		{65504, 0x7bff},
		{65519, 0x7bff},                 // below the midway point to 65536
		{65520, 0x7c00},                 // midway between 65504 and 65536: even is inf
		{0x1p-24, 0x0001},               // smallest subnormal
		{0x1p-25, 0x0000},               // midway between 0 and 2^-24: even is 0
		{1 + 0x1p-11, 0x3c00},           // midway, rounds to the even 1.0
		{1 + 3*0x1p-11, 0x3c02},         // midway, rounds up to even mantissa 2
		{1 + 0x1p-11 + 0x1p-20, 0x3c01}, // just past midway
	}
	for _, c := range cases {
		assert.Equal(t, c.want, floatToHalf(c.f), "%g", c.f)
	}
}

func TestBFloat(t *testing.T) {
	cases := []struct {
		f    float32
		want uint16
	}{
		{1, 0x3f80},
		{-2, 0xc000},
		{1 + 0x1p-8, 0x3f80},           // midway: even is 1.0
		{1 + 3*0x1p-8, 0x3f82},         // midway: even is mantissa 2
		{1 + 0x1p-8 + 0x1p-20, 0x3f81}, // past midway
		{math.MaxFloat32, 0x7f80},      // beyond bf16's largest + half ulp: inf
		{float32(math.Inf(-1)), 0xff80},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, floatToBFloat(c.f), "%g", c.f)
	}
	nan := floatToBFloat(math.Float32frombits(0x7f800001)) // payload only in the dropped half
	assert.True(t, math.IsNaN(float64(bfloatToFloat(nan))), "NaN must not round to inf: got %#04x", nan)
	for b := range 1 << 16 { // every non-NaN bf16 survives a round trip
		f := bfloatToFloat(uint16(b))
		if !math.IsNaN(float64(f)) {
			require.Equal(t, uint16(b), floatToBFloat(f), "bits %#04x", b)
		}
	}
	assert.Equal(t, float32(1.5), bfloatToFloat(0x3fc0))
}

func TestHalfAtLeast(t *testing.T) {
	for _, f := range []float32{1.0 / 3, 0.1, 1e-6, 3e-8, 1000.3, 1} {
		h := halfAtLeast(f)
		got := halfToFloat(h)
		assert.GreaterOrEqual(t, got, f)
		assert.Less(t, halfToFloat(h-1), f, "%g: %#04x is not the smallest half >= it", f, h)
	}
	assert.Equal(t, uint16(0x3c00), halfAtLeast(1))
}

// The vector F16 decode gives halfToFloat's bits for every binary16 but
// NaNs (VCVTPH2PS quiets signalling ones: still NaN), from every start
// offset of its 16-lane vectors, with a partial last vector.
func TestHalvesAVX512IsHalfToFloat(t *testing.T) {
	if !hasDecodeAVX512 {
		t.Skip("this CPU has no AVX-512 BW (or is not amd64): the vector F16 decode is not used")
	}
	src := make([]byte, 2*(1<<16+7))
	for i := range 1 << 16 {
		src[2*i], src[2*i+1] = byte(i), byte(i>>8)
	}
	for _, start := range []int{0, 1, 5} {
		n := 1<<16 + 7 - start
		dst := make([]float32, n+1)
		dst[n] = 42
		halvesAVX512(&dst[0], &src[2*start], n)
		require.Equal(t, float32(42), dst[n], "wrote past n")
		for i := range n - 7 {
			bits := uint16(start + i)
			want := halfToFloat(bits)
			if math.IsNaN(float64(want)) {
				require.True(t, math.IsNaN(float64(dst[i])), "bits %#04x", bits)
				continue
			}
			require.Equal(t, math.Float32bits(want), math.Float32bits(dst[i]), "bits %#04x", bits)
		}
	}
}

// randomBlocks is nb blocks of f of random bytes whose float16 scales (at
// the byte offsets halves of each block) are of every kind but NaN:
// subnormal, infinite, the largest, one, a negative normal, then random.
func randomBlocks(r *rand.Rand, f *Format, nb int, halves []int) []byte {
	src := make([]byte, f.BlockBytes*nb)
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	specials := []uint16{0x0001, 0x7c00, 0x7bff, 0x3c00, 0x8400}
	for b := range nb {
		for _, off := range halves {
			at := b*f.BlockBytes + off
			if b < len(specials) {
				src[at], src[at+1] = byte(specials[b]), byte(specials[b]>>8)
			}
			if d := uint16(src[at]) | uint16(src[at+1])<<8; d&0x7c00 == 0x7c00 && d&0x3ff != 0 {
				src[at+1] &^= 0x40 // a NaN's payload may differ: make it finite
			}
		}
	}
	return src
}

// The AVX-512 decoders give the Go loops' bits, block after block, on
// random blocks whose float16 scales are of every kind but NaN (subnormal,
// infinite, the largest): F16 (whose every value TestHalvesAVX512IsHalfToFloat
// covers), Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q1_0_g128 and TQ2_0_g128.
func TestVectorDecodersAreTheLoops(t *testing.T) {
	if !hasDecodeAVX512 {
		t.Skip("this CPU has no AVX-512 BW (or is not amd64): the vector decoders are not used")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		f      Format
		halves []int // byte offsets of float16 scales in a block
	}{{formatF16, []int{0}}, {formatQ8_0, []int{0}}, {formatQ4_K, []int{0, 2}}, {formatQ5_K, []int{0, 2}}, {formatQ1_0, []int{0}}, {formatTQ2_0, []int{32}}, {formatQ4_0, []int{0}}, {formatQ6_K, []int{208}}} {
		t.Run(c.f.Type.String(), func(t *testing.T) {
			nb := 300 / c.f.BlockSize * 8
			src := randomBlocks(r, &c.f, nb, c.halves)
			n := nb * c.f.BlockSize
			want, got := make([]float32, n), make([]float32, n+1)
			defer func(old bool) { hasDecodeAVX512 = old }(hasDecodeAVX512)
			hasDecodeAVX512 = false
			c.f.Dequantize(want, src)
			hasDecodeAVX512 = true
			got[n] = 42
			c.f.Dequantize(got[:n], src)
			require.Equal(t, float32(42), got[n], "wrote past the blocks")
			for i := range want {
				if math.IsNaN(float64(want[i])) { // 0 x Inf
					require.True(t, math.IsNaN(float64(got[i])), "weight %d", i)
					continue
				}
				require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]), "weight %d", i)
			}
		})
	}
}
