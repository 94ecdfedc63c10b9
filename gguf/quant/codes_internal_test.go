package quant

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The vector codes decoders give the Go loops' codes, scales and offsets,
// on random blocks with float16 scales of every kind but NaN, and write
// nothing past the blocks.
func TestVectorCodesAreTheLoops(t *testing.T) {
	if !hasDecodeAVX512 {
		t.Skip("this CPU has no AVX-512 BW (or is not amd64): the vector codes decoders are not used")
	}
	vbmi := hasVBMI
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		f      Format
		halves []int // byte offsets of float16 scales in a block
	}{{formatQ8_0, []int{0}}, {formatQ4_0, []int{0}}, {formatQ4_K, []int{0, 2}}, {formatQ1_0, []int{0}}, {formatTQ2_0, []int{32}}, {formatQ5_K, []int{0, 2}}, {formatQ6_K, []int{208}}} {
		t.Run(c.f.Type.String(), func(t *testing.T) {
			if c.f.Type == formatTQ2_0.Type && !vbmi {
				t.Skip("this CPU has no AVX-512 VBMI: TQ2_0_g128's vector decoder is not used")
			}
			nb := 300 / c.f.BlockSize * 8
			src := randomBlocks(r, &c.f, nb, c.halves)
			n, ns := nb*c.f.BlockSize, nb*c.f.BlockSize/c.f.CodeBlock
			decode := func(vector bool) ([]byte, []float32, []float32) {
				defer func(d, v bool) { hasDecodeAVX512, hasVBMI = d, v }(hasDecodeAVX512, hasVBMI)
				hasDecodeAVX512, hasVBMI = vector, vector && vbmi
				codes, scale, offset := make([]byte, n+1), make([]float32, ns+1), make([]float32, ns+1)
				codes[n], scale[ns], offset[ns] = 42, 42, 42
				c.f.Codes(codes[:n], scale[:ns], offset[:ns], src)
				require.Equal(t, byte(42), codes[n], "wrote codes past the blocks")
				require.Equal(t, float32(42), scale[ns], "wrote scales past the blocks")
				require.Equal(t, float32(42), offset[ns], "wrote offsets past the blocks")
				return codes[:n], scale[:ns], offset[:ns]
			}
			wc, ws, wo := decode(false)
			gc, gs, gof := decode(true)
			require.Equal(t, wc, gc, "codes")
			for i := range ws {
				require.Equal(t, math.Float32bits(ws[i]), math.Float32bits(gs[i]), "scale %d", i)
				require.Equal(t, math.Float32bits(wo[i]), math.Float32bits(gof[i]), "offset %d", i)
			}
		})
	}
}
