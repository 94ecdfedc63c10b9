package quant

import (
	"math"

	"github.com/stratalab/strata/gguf"
)

// Q8_0: 32 weights per 34-byte block {f16 d; int8 qs[32]}, weight = qs[j]*d.
var formatQ8_0 = Format{
	Type: gguf.Q8_0, BlockSize: 32, BlockBytes: 34,
	Codes: q8Codes, CodeBlock: 32,
	Dequantize: func(dst []float32, src []byte) {
		nb := blocks(gguf.Q8_0, len(dst), 32, len(src), 34)
		if hasDecodeAVX512 && nb > 0 {
			q8BlocksAVX512(&dst[0], &src[0], nb)
			return
		}
		for b := range nb {
			blk := (*[34]byte)(src[34*b:])
			out := (*[32]float32)(dst[32*b:])
			d := halfAt(blk[0:2])
			for j := range 32 {
				out[j] = float32(int8(blk[2+j])) * d
			}
		}
	},
	Dot: func(w []byte, x []float32) float32 {
		nb := blocks(gguf.Q8_0, len(x), 32, len(w), 34)
		var sum float32
		for b := range nb {
			blk := (*[34]byte)(w[34*b:])
			xs := (*[32]float32)(x[32*b:])
			qs := (*[32]byte)(blk[2:])
			var s0, s1, s2, s3 float32
			for j := 0; j < 32; j += 4 {
				s0 += float32(int8(qs[j])) * xs[j]
				s1 += float32(int8(qs[j+1])) * xs[j+1]
				s2 += float32(int8(qs[j+2])) * xs[j+2]
				s3 += float32(int8(qs[j+3])) * xs[j+3]
			}
			sum += halfAt(blk[0:2]) * ((s0 + s1) + (s2 + s3))
		}
		return sum
	},
	// Quantize follows llama.cpp's quantize_row_q8_0_ref: d = absmax/127,
	// quants rounded half away from zero.
	Quantize: func(dst []byte, src []float32) {
		nb := blocks(gguf.Q8_0, len(src), 32, len(dst), 34)
		for b := range nb {
			xs := (*[32]float32)(src[32*b:])
			blk := (*[34]byte)(dst[34*b:])
			var amax float32
			for _, v := range xs {
				amax = max(amax, abs32(v))
			}
			d := amax / 127
			var id float32
			if d != 0 {
				id = 1 / d
			}
			putHalf(blk[0:2], d)
			for j, v := range xs {
				blk[2+j] = byte(int8(math.Round(float64(float32(v * id)))))
			}
		}
	},
}

// Q4_0: 32 weights per 18-byte block {f16 d; u8 qs[16]}; byte j holds weight
// j in its low nibble and weight j+16 in its high nibble; weight = (q-8)*d.
var formatQ4_0 = Format{
	Type: gguf.Q4_0, BlockSize: 32, BlockBytes: 18,
	Codes: q4Codes, CodeBlock: 32,
	Dequantize: func(dst []float32, src []byte) {
		nb := blocks(gguf.Q4_0, len(dst), 32, len(src), 18)
		if hasDecodeAVX512 && nb > 0 {
			q4BlocksAVX512(&dst[0], &src[0], nb)
			return
		}
		for b := range nb {
			blk := (*[18]byte)(src[18*b:])
			out := (*[32]float32)(dst[32*b:])
			d := halfAt(blk[0:2])
			for j := range 16 {
				q := blk[2+j]
				out[j] = float32(int(q&0xf)-8) * d
				out[j+16] = float32(int(q>>4)-8) * d
			}
		}
	},
	Dot: func(w []byte, x []float32) float32 {
		nb := blocks(gguf.Q4_0, len(x), 32, len(w), 18)
		var sum float32
		for b := range nb {
			blk := (*[18]byte)(w[18*b:])
			xs := (*[32]float32)(x[32*b:])
			qs := (*[16]byte)(blk[2:])
			var s0, s1, s2, s3 float32
			for j := 0; j < 16; j += 2 {
				q0, q1 := qs[j], qs[j+1]
				s0 += float32(int(q0&0xf)-8) * xs[j]
				s1 += float32(int(q0>>4)-8) * xs[j+16]
				s2 += float32(int(q1&0xf)-8) * xs[j+1]
				s3 += float32(int(q1>>4)-8) * xs[j+17]
			}
			sum += halfAt(blk[0:2]) * ((s0 + s1) + (s2 + s3))
		}
		return sum
	},
	// Quantize follows llama.cpp's quantize_row_q4_0_ref: d = -m/8 where m is
	// the value of largest magnitude (first one on ties), so m itself is exact
	// at q = 0; quants are floor(x/d + 8.5) capped at 15.
	Quantize: func(dst []byte, src []float32) {
		nb := blocks(gguf.Q4_0, len(src), 32, len(dst), 18)
		for b := range nb {
			xs := (*[32]float32)(src[32*b:])
			blk := (*[18]byte)(dst[18*b:])
			var amax, m float32
			for _, v := range xs {
				if a := abs32(v); amax < a {
					amax, m = a, v
				}
			}
			d := m / -8
			var id float32
			if d != 0 {
				id = 1 / d
			}
			putHalf(blk[0:2], d)
			for j := range 16 {
				// The float32 conversions keep each step rounded as in C (no FMA fusion).
				lo := min(15, int(float32(xs[j]*id)+8.5))
				hi := min(15, int(float32(xs[j+16]*id)+8.5))
				blk[2+j] = byte(lo) | byte(hi)<<4
			}
		}
	},
}

func abs32(v float32) float32 {
	return math.Float32frombits(math.Float32bits(v) &^ (1 << 31))
}
