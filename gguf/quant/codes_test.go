package quant_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gguf/quant"
)

// TestCodesAreTheDecodedValues holds each integer format's codes, scales and
// offsets to Dequantize, bit for bit, on random blocks (every bit pattern of
// the codes, negative Q6_K scales, TQ2's unused code 3) whose half-precision
// fields are set to finite values.
func TestCodesAreTheDecodedValues(t *testing.T) {
	halves := map[gguf.Type][]int{ // where each block keeps its f16 multipliers
		gguf.Q4_0: {0}, gguf.Q8_0: {0}, gguf.Q4_K: {0, 2}, gguf.Q5_K: {0, 2},
		gguf.Q6_K: {208}, gguf.Q1_0_G128: {0}, gguf.TQ2_0_G128: {32},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, typ := range quant.Supported() {
		f := mustFor(t, typ)
		if f.Codes == nil {
			require.Contains(t, []gguf.Type{gguf.F32, gguf.F16, gguf.BF16}, typ, "%v has no codes", typ)
			continue
		}
		require.Contains(t, halves, typ, "test has no half offsets for %v", typ)
		const nb = 8
		src := make([]byte, nb*f.BlockBytes)
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		for b := range nb {
			for _, at := range halves[typ] {
				// A random finite half of either sign, 2^-14 .. 2^1.
				h := uint16(rng.IntN(16)+1)<<10 | uint16(rng.IntN(1024)) | uint16(rng.IntN(2))<<15
				copy(src[b*f.BlockBytes+at:], le16(h))
			}
		}
		n := nb * f.BlockSize
		want := make([]float32, n)
		f.Dequantize(want, src)
		codes := make([]byte, n)
		scale, offset := make([]float32, n/f.CodeBlock), make([]float32, n/f.CodeBlock)
		f.Codes(codes, scale, offset, src)
		for i := range n {
			b := i / f.CodeBlock
			require.Equal(t, want[i], scale[b]*float32(codes[i])-offset[b], "%v element %d: code %d scale %g offset %g", typ, i, codes[i], scale[b], offset[b])
		}
	}
}
