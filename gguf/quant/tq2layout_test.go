package quant_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/x448/float16"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gguf/quant"
)

// tq2Standard quantizes n random weights to standard TQ2_0_g128 bytes.
func tq2Standard(t *testing.T, n int) []byte {
	return quantize(t, mustFor(t, gguf.TQ2_0_G128), weights(rand.New(rand.NewPCG(5, 6)), n))
}

// scaleFirst moves each block's trailing f16 scale to its front.
func scaleFirst(std []byte) []byte {
	var out []byte
	for b := 0; b < len(std); b += 34 {
		out = append(append(out, std[b+32:b+34]...), std[b:b+32]...)
	}
	return out
}

// group64 quantizes xs as the group-64 Q2_0 layout: per 64 weights an f16
// absmax scale, then 16 bytes of 2-bit codes (0 = -1, 1 = 0, 2 = +1).
func group64(xs []float32) []byte {
	var out []byte
	for g := 0; g < len(xs); g += 64 {
		d := float32(absmax(xs[g : g+64]))
		out = append(out, le16(float16.Fromfloat32(d).Bits())...)
		for k := range 16 {
			var b byte
			for j := range 4 {
				v, code := xs[g+4*k+j], byte(1)
				if float32(math.Abs(float64(v))) >= d/2 {
					code = 2
					if v < 0 {
						code = 0
					}
				}
				b |= code << (2 * j)
			}
			out = append(out, b)
		}
	}
	return out
}

func TestDetectTQ2Standard(t *testing.T) {
	const n = 8192
	std := tq2Standard(t, n)
	got, err := quant.DetectTQ2(std, n)
	require.NoError(t, err)
	assert.Equal(t, quant.TQ2Standard, got)

	padded := append(append([]byte{}, std...), make([]byte, 32)...)
	got, err = quant.DetectTQ2(padded, n)
	require.NoError(t, err)
	assert.Equal(t, quant.TQ2Standard, got, "alignment padding after the tensor")

	canon, err := quant.CanonicalTQ2(std, quant.TQ2Standard)
	require.NoError(t, err)
	assert.Equal(t, std, canon)
}

func TestDetectTQ2ScaleFirst(t *testing.T) {
	const n = 8192
	std := tq2Standard(t, n)
	sf := scaleFirst(std)
	got, err := quant.DetectTQ2(sf, n)
	require.NoError(t, err)
	assert.Equal(t, quant.TQ2ScaleFirst, got)

	canon, err := quant.CanonicalTQ2(sf, quant.TQ2ScaleFirst)
	require.NoError(t, err)
	assert.Equal(t, std, canon, "canonical form of scale-first data is the standard bytes")

	_, err = quant.CanonicalTQ2(sf[:100], quant.TQ2ScaleFirst)
	assert.EqualError(t, err, "quant: scale-first TQ2_0_g128 data of 100 bytes is not a whole number of 34-byte blocks")
}

func TestDetectTQ2Group64(t *testing.T) {
	// 8192 weights: both sizes fit within padding, so content decides;
	// 65536 weights: only the group-64 size (18432 vs 17408 bytes) fits.
	for _, n := range []int{8192, 65536} {
		g64 := group64(weights(rand.New(rand.NewPCG(7, 8)), n))
		got, err := quant.DetectTQ2(g64, int64(n))
		require.NoError(t, err, "n=%d", n)
		assert.Equal(t, quant.TQ2Group64, got, "n=%d", n)
		_, err = quant.CanonicalTQ2(g64, got)
		assert.ErrorContains(t, err, "group-64 Q2_0 layout is not supported")
	}
}

func TestDetectTQ2Refusals(t *testing.T) {
	const n = 8192
	std := tq2Standard(t, n)

	garbage := make([]byte, len(std))
	rng := rand.New(rand.NewPCG(9, 10))
	for i := range garbage {
		garbage[i] = byte(rng.Uint32())
	}
	_, err := quant.DetectTQ2(garbage, n)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "quant: TQ2_0_g128 tensor of 8192 elements (2176 bytes) is inconsistent with every layout its size allows: as standard, block ")
	assert.Contains(t, err.Error(), "; as scale-first, block ")

	_, err = quant.DetectTQ2(std[:1000], n)
	assert.EqualError(t, err, "quant: TQ2_0_g128 tensor of 8192 elements has 1000 bytes, which fits no layout (standard needs 2176, scale-first needs 2176, group-64 needs 2304; padding under 256 bytes allowed)")

	big := tq2Standard(t, 65536)
	_, err = quant.DetectTQ2(append(big, make([]byte, 300)...), 65536)
	assert.ErrorContains(t, err, "has 17708 bytes, which fits no layout (standard needs 17408")

	_, err = quant.DetectTQ2(std, 100)
	assert.EqualError(t, err, "quant: TQ2_0_g128 tensor of 100 elements: count must be a positive multiple of 64")

	nan := append([]byte{}, std...)
	copy(nan[5*34+32:], le16(0x7e00))
	_, err = quant.DetectTQ2(nan, n)
	assert.ErrorContains(t, err, "as standard, block 5 scale is NaN")

	three := append([]byte{}, std...)
	three[2*34+1] |= 0b1100 // weight 5 of block 2
	_, err = quant.DetectTQ2(three, n)
	assert.ErrorContains(t, err, "as standard, block 2 has code 3 at weight 5")

	spread := append([]byte{}, std...)
	copy(spread[3*34+32:], le16(0x0001)) // 2^-24 among scales near 0.001..10
	_, err = quant.DetectTQ2(spread, n)
	assert.ErrorContains(t, err, "as standard, block scales range from 5.9604645e-08 to")
	assert.ErrorContains(t, err, "more than a factor 1048576 apart")
}

// One block that reads validly both ways: as standard its codes start
// 0x00 0x28 and its scale is 0x2a00; as scale-first its scale is 0x2800 and
// the bytes 0x00 0x2a end its codes, all without a code 3.
func TestDetectTQ2Ambiguous(t *testing.T) {
	blk := make([]byte, 34)
	for i := range 32 {
		blk[i] = 0x55 // four zero codes
	}
	blk[0], blk[1] = 0x00, 0x28
	blk[32], blk[33] = 0x00, 0x2a
	_, err := quant.DetectTQ2(blk, 128)
	assert.EqualError(t, err, "quant: TQ2_0_g128 tensor of 128 elements (34 bytes) is ambiguous: it is consistent with the standard and scale-first layouts; refusing to guess")
}

func TestTQ2LayoutString(t *testing.T) {
	assert.Equal(t, "standard", quant.TQ2Standard.String())
	assert.Equal(t, "scale-first", quant.TQ2ScaleFirst.String())
	assert.Equal(t, "group-64", quant.TQ2Group64.String())
	_, err := quant.CanonicalTQ2(nil, quant.TQ2Layout(7))
	assert.EqualError(t, err, "quant: unknown TQ2 layout TQ2Layout(7)")
}
