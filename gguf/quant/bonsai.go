package quant

import (
	"math"

	"github.com/stratalab/strata/gguf"
)

// Q1_0_g128: 128 weights per 18-byte block {f16 d; u8 signs[16]}; weight i
// is +d when bit i%8 of signs[i/8] is set, else -d.
var formatQ1_0 = Format{
	Type: gguf.Q1_0_G128, BlockSize: 128, BlockBytes: 18,
	Codes: q1Codes, CodeBlock: 128,
	Dequantize: func(dst []float32, src []byte) {
		nb := blocks(gguf.Q1_0_G128, len(dst), 128, len(src), 18)
		if hasDecodeAVX512 && nb > 0 {
			q1BlocksAVX512(&dst[0], &src[0], nb)
			return
		}
		for b := range nb {
			blk := (*[18]byte)(src[18*b:])
			out := (*[128]float32)(dst[128*b:])
			d := math.Float32bits(halfAt(blk[0:2]))
			for k := range 16 {
				// flipSign by table: a byte's eight sign masks at once.
				masks := &q1SignMasks[blk[2+k]]
				o := (*[8]float32)(out[8*k:])
				for i, m := range masks {
					o[i] = math.Float32frombits(d ^ m)
				}
			}
		}
	},
	Dot: func(w []byte, x []float32) float32 {
		nb := blocks(gguf.Q1_0_G128, len(x), 128, len(w), 18)
		var sum float32
		for b := range nb {
			blk := (*[18]byte)(w[18*b:])
			var s0, s1 float32
			for k := range 16 {
				xs := (*[8]float32)(x[128*b+8*k:])
				neg := ^blk[2+k] // set bits mark weights of -d
				s0 += flipSign(xs[0], neg) + flipSign(xs[1], neg>>1) + flipSign(xs[2], neg>>2) + flipSign(xs[3], neg>>3)
				s1 += flipSign(xs[4], neg>>4) + flipSign(xs[5], neg>>5) + flipSign(xs[6], neg>>6) + flipSign(xs[7], neg>>7)
			}
			sum += halfAt(blk[0:2]) * (s0 + s1)
		}
		return sum
	},
	// Quantize sets d to the group's mean |w| and each bit to w >= 0.
	Quantize: func(dst []byte, src []float32) {
		nb := blocks(gguf.Q1_0_G128, len(src), 128, len(dst), 18)
		for b := range nb {
			xs := (*[128]float32)(src[128*b:])
			blk := (*[18]byte)(dst[18*b:])
			var sumAbs float64
			for _, v := range xs {
				sumAbs += math.Abs(float64(v))
			}
			putHalf(blk[0:2], float32(sumAbs/128))
			for k := range 16 {
				var bits byte
				for i, v := range xs[8*k : 8*k+8] {
					if v >= 0 {
						bits |= 1 << i
					}
				}
				blk[2+k] = bits
			}
		}
	},
}

// q1SignMasks[b][i] is the sign bit that Q1_0_g128's sign byte b puts on
// its weight i: set (negative) where the bit is clear.
var q1SignMasks = func() (t [256][8]uint32) {
	for b := range t {
		for i := range t[b] {
			if b>>i&1 == 0 {
				t[b][i] = 1 << 31
			}
		}
	}
	return t
}()

// flipSign returns v negated when the low bit of neg is set, without a branch.
func flipSign(v float32, neg byte) float32 {
	return math.Float32frombits(math.Float32bits(v) ^ uint32(neg&1)<<31)
}

// tq2Value maps a TQ2_0_g128 2-bit code to its multiple of d. A quantizer
// never writes code 3; decoding it as 0 follows the reference engines.
var tq2Value = [4]float32{-1, 0, 1, 0}

// tq2Values[c] is tq2Value of each of code byte c's four codes.
var tq2Values = func() (t [256][4]float32) {
	for c := range t {
		for i := range t[c] {
			t[c][i] = tq2Value[c>>(2*i)&3]
		}
	}
	return t
}()

// TQ2_0_g128: 128 weights per 34-byte block {u8 codes[32]; f16 d}; weight
// i is d*tq2Value[code] with code = bits 2*(i%4)..+1 of codes[i/4].
var formatTQ2_0 = Format{
	Type: gguf.TQ2_0_G128, BlockSize: 128, BlockBytes: 34,
	Codes: tq2Codes, CodeBlock: 128,
	Dequantize: func(dst []float32, src []byte) {
		nb := blocks(gguf.TQ2_0_G128, len(dst), 128, len(src), 34)
		if hasDecodeAVX512 && nb > 0 {
			tq2BlocksAVX512(&dst[0], &src[0], nb)
			return
		}
		for b := range nb {
			blk := (*[34]byte)(src[34*b:])
			out := (*[128]float32)(dst[128*b:])
			d := halfAt(blk[32:34])
			for k := range 32 {
				v := &tq2Values[blk[k]] // a code byte's four multiples at once
				o := (*[4]float32)(out[4*k:])
				o[0], o[1], o[2], o[3] = d*v[0], d*v[1], d*v[2], d*v[3]
			}
		}
	},
	Dot: func(w []byte, x []float32) float32 {
		nb := blocks(gguf.TQ2_0_G128, len(x), 128, len(w), 34)
		var sum float32
		for b := range nb {
			blk := (*[34]byte)(w[34*b:])
			var s0, s1 float32
			for k := range 32 {
				xs := (*[4]float32)(x[128*b+4*k:])
				c := blk[k]
				s0 += tq2Value[c&3]*xs[0] + tq2Value[c>>2&3]*xs[1]
				s1 += tq2Value[c>>4&3]*xs[2] + tq2Value[c>>6]*xs[3]
			}
			sum += halfAt(blk[32:34]) * (s0 + s1)
		}
		return sum
	},
	// Quantize sets d to the group's absmax; weights under d/2 in magnitude
	// become 0, the rest their sign.
	Quantize: func(dst []byte, src []float32) {
		nb := blocks(gguf.TQ2_0_G128, len(src), 128, len(dst), 34)
		for b := range nb {
			xs := (*[128]float32)(src[128*b:])
			blk := (*[34]byte)(dst[34*b:])
			var d float32
			for _, v := range xs {
				d = max(d, abs32(v))
			}
			for k := range 32 {
				var codes byte
				for i, v := range xs[4*k : 4*k+4] {
					code := byte(1) // 0
					switch {
					case abs32(v) < d/2 || v == 0:
					case v > 0:
						code = 2
					default:
						code = 0
					}
					codes |= code << (2 * i)
				}
				blk[k] = codes
			}
			putHalf(blk[32:34], d)
		}
	},
}
