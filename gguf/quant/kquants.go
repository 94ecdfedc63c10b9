package quant

import (
	"math"

	"github.com/stratalab/strata/gguf"
)

// The K-quants pack 256 weights per super-block. Q4_K and Q5_K split it into
// 8 sub-blocks of 32 with a 6-bit scale and 6-bit min each (12 bytes, see
// scaleMinK4): weight = d*sc*q - dmin*m. Q6_K splits it into 16 sub-blocks
// of 16 with an int8 scale each: weight = d*sc*(q-32).

// scaleMinK4 unpacks sub-block j's scale and min as ggml's get_scale_min_k4:
// bytes 0-3 and 4-7 hold the low 6 bits of scales 0-3 and mins 0-3; bytes
// 8-11 hold the low 4 bits of scales and mins 4-7, whose top 2 bits sit in
// the spare top bits of bytes 0-3 and 4-7.
func scaleMinK4(j int, q *[12]byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xf | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

// putScaleMinK4 is the inverse of scaleMinK4 for 6-bit values.
func putScaleMinK4(q *[12]byte, sc, m *[8]uint8) {
	for j := range 4 {
		q[j] = sc[j] | (sc[j+4]>>4)<<6
		q[j+4] = m[j] | (m[j+4]>>4)<<6
		q[j+8] = sc[j+4]&0xf | (m[j+4]&0xf)<<4
	}
}

// kScales returns the effective per-sub-block multipliers d*sc and dmin*m
// of a Q4_K or Q5_K block header (d, dmin, 12 scale bytes).
func kScales(hdr *[16]byte) (scale, offset [8]float32) {
	d, dmin := halfAt(hdr[0:2]), halfAt(hdr[2:4])
	q := (*[12]byte)(hdr[4:])
	for j := range 8 {
		sc, m := scaleMinK4(j, q)
		scale[j] = d * float32(sc)
		offset[j] = dmin * float32(m)
	}
	return scale, offset
}

var formatQ4_K = Format{
	Type: gguf.Q4_K, BlockSize: 256, BlockBytes: 144,
	Codes: q4kCodes, CodeBlock: 32,
	// Layout: d, dmin (f16), scales[12], qs[128]. Each 32-byte run of qs
	// covers 64 weights: low nibbles are sub-block 2c, high nibbles 2c+1.
	Dequantize: func(dst []float32, src []byte) {
		nb := blocks(gguf.Q4_K, len(dst), 256, len(src), 144)
		for b := range nb {
			blk := (*[144]byte)(src[144*b:])
			out := (*[256]float32)(dst[256*b:])
			scale, offset := kScales((*[16]byte)(blk[:16]))
			if hasDecodeAVX512 {
				q4kBlockAVX512(&out[0], &blk[16], &scale, &offset)
				continue
			}
			for c := range 4 {
				qs := (*[32]byte)(blk[16+32*c:])
				lo, hi := (*[32]float32)(out[64*c:]), (*[32]float32)(out[64*c+32:])
				for l, q := range qs {
					lo[l] = scale[2*c]*float32(q&0xf) - offset[2*c]
					hi[l] = scale[2*c+1]*float32(q>>4) - offset[2*c+1]
				}
			}
		}
	},
	Dot: func(w []byte, x []float32) float32 {
		nb := blocks(gguf.Q4_K, len(x), 256, len(w), 144)
		var sum float32
		for b := range nb {
			blk := (*[144]byte)(w[144*b:])
			scale, offset := kScales((*[16]byte)(blk[:16]))
			for c := range 4 {
				qs := (*[32]byte)(blk[16+32*c:])
				lo, hi := (*[32]float32)(x[256*b+64*c:]), (*[32]float32)(x[256*b+64*c+32:])
				var qxLo, qxHi, xLo, xHi float32
				for l, q := range qs {
					qxLo += float32(q&0xf) * lo[l]
					qxHi += float32(q>>4) * hi[l]
					xLo += lo[l]
					xHi += hi[l]
				}
				sum += (scale[2*c]*qxLo - offset[2*c]*xLo) + (scale[2*c+1]*qxHi - offset[2*c+1]*xHi)
			}
		}
		return sum
	},
	Quantize: func(dst []byte, src []float32) {
		nb := blocks(gguf.Q4_K, len(src), 256, len(dst), 144)
		for b := range nb {
			blk := (*[144]byte)(dst[144*b:])
			L := quantizeKMin(blk[:], (*[256]float32)(src[256*b:]), 15)
			for c := range 4 {
				for l := range 32 {
					blk[16+32*c+l] = L[64*c+l] | L[64*c+32+l]<<4
				}
			}
		}
	},
}

var formatQ5_K = Format{
	Type: gguf.Q5_K, BlockSize: 256, BlockBytes: 176,
	Codes: q5kCodes, CodeBlock: 32,
	// Layout: d, dmin (f16), scales[12], qh[32], qs[128]. qs is packed as in
	// Q4_K; the fifth bit of weight 64c+l is bit 2c of qh[l], of weight
	// 64c+32+l bit 2c+1.
	Dequantize: func(dst []float32, src []byte) {
		nb := blocks(gguf.Q5_K, len(dst), 256, len(src), 176)
		for b := range nb {
			blk := (*[176]byte)(src[176*b:])
			out := (*[256]float32)(dst[256*b:])
			scale, offset := kScales((*[16]byte)(blk[:16]))
			if hasDecodeAVX512 {
				var codes [256]byte
				q5kCodesAVX512(&codes[0], &blk[16], &blk[48])
				codesBlockAVX512(&out[0], &codes[0], &scale, &offset)
				continue
			}
			qh := (*[32]byte)(blk[16:])
			for c := range 4 {
				qs := (*[32]byte)(blk[48+32*c:])
				lo, hi := (*[32]float32)(out[64*c:]), (*[32]float32)(out[64*c+32:])
				for l, q := range qs {
					h := qh[l] >> (2 * c)
					lo[l] = scale[2*c]*float32(q&0xf|(h&1)<<4) - offset[2*c]
					hi[l] = scale[2*c+1]*float32(q>>4|(h&2)<<3) - offset[2*c+1]
				}
			}
		}
	},
	Dot: func(w []byte, x []float32) float32 {
		nb := blocks(gguf.Q5_K, len(x), 256, len(w), 176)
		var sum float32
		for b := range nb {
			blk := (*[176]byte)(w[176*b:])
			scale, offset := kScales((*[16]byte)(blk[:16]))
			qh := (*[32]byte)(blk[16:])
			for c := range 4 {
				qs := (*[32]byte)(blk[48+32*c:])
				lo, hi := (*[32]float32)(x[256*b+64*c:]), (*[32]float32)(x[256*b+64*c+32:])
				var qxLo, qxHi, xLo, xHi float32
				for l, q := range qs {
					h := qh[l] >> (2 * c)
					qxLo += float32(q&0xf|(h&1)<<4) * lo[l]
					qxHi += float32(q>>4|(h&2)<<3) * hi[l]
					xLo += lo[l]
					xHi += hi[l]
				}
				sum += (scale[2*c]*qxLo - offset[2*c]*xLo) + (scale[2*c+1]*qxHi - offset[2*c+1]*xHi)
			}
		}
		return sum
	},
	Quantize: func(dst []byte, src []float32) {
		nb := blocks(gguf.Q5_K, len(src), 256, len(dst), 176)
		for b := range nb {
			blk := (*[176]byte)(dst[176*b:])
			L := quantizeKMin(blk[:], (*[256]float32)(src[256*b:]), 31)
			qh := (*[32]byte)(blk[16:])
			*qh = [32]byte{}
			for c := range 4 {
				for l := range 32 {
					q0, q1 := L[64*c+l], L[64*c+32+l]
					blk[48+32*c+l] = q0&0xf | (q1&0xf)<<4
					qh[l] |= (q0>>4)<<(2*c) | (q1>>4)<<(2*c+1)
				}
			}
		}
	},
}

// quantizeKMin writes the d, dmin and scale header of a Q4_K/Q5_K block for
// the 256 weights xs and returns their quants in [0, nmax]. It is a plain
// min/max quantizer, not llama.cpp's RMSE-optimising search: each sub-block
// maps [min(0, lowest), highest] onto nmax steps. Scales are rounded up, not
// to nearest, so every weight stays in range and is off by at most half a
// step (d*sc/2).
func quantizeKMin(blk []byte, xs *[256]float32, nmax int) *[256]uint8 {
	var off, hi [8]float32
	for j := range 8 {
		lo := float32(0)
		hi[j] = float32(math.Inf(-1))
		for _, v := range xs[32*j : 32*j+32] {
			lo, hi[j] = min(lo, v), max(hi[j], v)
		}
		off[j] = -lo
	}
	var sc, m [8]uint8
	dminBits := halfAtLeast(maxOf(off[:]) / 63)
	dmin := halfToFloat(dminBits)
	var span [8]float32
	for j := range 8 {
		if dmin > 0 {
			m[j] = uint8(min(63, math.Ceil(float64(off[j]/dmin))))
		}
		span[j] = hi[j] + dmin*float32(m[j])
	}
	dBits := halfAtLeast(maxOf(span[:]) / float32(nmax*63))
	d := halfToFloat(dBits)
	var L [256]uint8
	for j := range 8 {
		if d > 0 {
			sc[j] = uint8(min(63, math.Ceil(float64(span[j]/(float32(nmax)*d)))))
		}
		step, shift := d*float32(sc[j]), dmin*float32(m[j])
		if step == 0 {
			continue // the whole sub-block is 0 (dmin*m covers any negatives)
		}
		for i, v := range xs[32*j : 32*j+32] {
			L[32*j+i] = uint8(min(float64(nmax), max(0, math.Round(float64((v+shift)/step)))))
		}
	}
	blk[0], blk[1] = byte(dBits), byte(dBits>>8)
	blk[2], blk[3] = byte(dminBits), byte(dminBits>>8)
	putScaleMinK4((*[12]byte)(blk[4:]), &sc, &m)
	return &L
}

var formatQ6_K = Format{
	Type: gguf.Q6_K, BlockSize: 256, BlockBytes: 210,
	Codes: q6kCodes, CodeBlock: 16,
	// Layout: ql[128], qh[64], int8 scales[16], f16 d. Each 128-weight half h
	// uses ql[64h:64h+64] and qh[32h:32h+32]: weight 128h+32k+l (k = 0..3,
	// l = 0..31) has its low 4 bits in ql[64h+32(k&1)+l] (low nibble for
	// k < 2, high for k >= 2) and its top 2 bits at bits 2k of qh[32h+l].
	Dequantize: func(dst []float32, src []byte) {
		nb := blocks(gguf.Q6_K, len(dst), 256, len(src), 210)
		for b := range nb {
			blk := (*[210]byte)(src[210*b:])
			out := (*[256]float32)(dst[256*b:])
			d := halfAt(blk[208:210])
			if hasDecodeAVX512 {
				var scales [16]float32
				for i, s := range blk[192:208] {
					scales[i] = d * float32(int8(s))
				}
				q6kBlockAVX512(&out[0], &blk[0], &scales)
				continue
			}
			for h := range 2 {
				ql := (*[64]byte)(blk[64*h:])
				qh := (*[32]byte)(blk[128+32*h:])
				o := (*[128]float32)(out[128*h:])
				for k := range 2 { // l in [16k, 16k+16) shares one scale per quarter
					sc := blk[192+8*h+k:]
					s1, s2 := d*float32(int8(sc[0])), d*float32(int8(sc[2]))
					s3, s4 := d*float32(int8(sc[4])), d*float32(int8(sc[6]))
					for l := 16 * k; l < 16*k+16; l++ {
						q1, q2, q3, q4 := q6(ql[l], ql[l+32], qh[l])
						o[l], o[l+32] = s1*float32(q1), s2*float32(q2)
						o[l+64], o[l+96] = s3*float32(q3), s4*float32(q4)
					}
				}
			}
		}
	},
	Dot: func(w []byte, x []float32) float32 {
		nb := blocks(gguf.Q6_K, len(x), 256, len(w), 210)
		var sum float32
		for b := range nb {
			blk := (*[210]byte)(w[210*b:])
			scales := (*[16]byte)(blk[192:])
			var block float32
			for h := range 2 {
				ql := (*[64]byte)(blk[64*h:])
				qh := (*[32]byte)(blk[128+32*h:])
				xs := (*[128]float32)(x[256*b+128*h:])
				for k := range 2 { // l in [16k, 16k+16) shares one scale per quarter
					var s1, s2, s3, s4 float32
					for l := 16 * k; l < 16*k+16; l++ {
						q1, q2, q3, q4 := q6(ql[l], ql[l+32], qh[l])
						s1 += float32(q1) * xs[l]
						s2 += float32(q2) * xs[l+32]
						s3 += float32(q3) * xs[l+64]
						s4 += float32(q4) * xs[l+96]
					}
					sc := scales[8*h+k:]
					block += (float32(int8(sc[0]))*s1 + float32(int8(sc[2]))*s2) +
						(float32(int8(sc[4]))*s3 + float32(int8(sc[6]))*s4)
				}
			}
			sum += halfAt(blk[208:210]) * block
		}
		return sum
	},
	// Quantize is a plain absmax quantizer, not llama.cpp's RMSE search: each
	// 16-weight sub-block gets step absmax/31 (rounded up through the int8
	// scale), so every weight is off by at most half a step (d*sc/2).
	Quantize: func(dst []byte, src []float32) {
		nb := blocks(gguf.Q6_K, len(src), 256, len(dst), 210)
		for b := range nb {
			blk := (*[210]byte)(dst[210*b:])
			xs := (*[256]float32)(src[256*b:])
			var s [16]float32
			for j := range 16 {
				for _, v := range xs[16*j : 16*j+16] {
					s[j] = max(s[j], abs32(v))
				}
				s[j] /= 31
			}
			dBits := halfAtLeast(maxOf(s[:]) / 127)
			d := halfToFloat(dBits)
			var L [256]uint8
			for j := range 16 {
				var sc int8
				if d > 0 {
					sc = int8(min(127, math.Ceil(float64(s[j]/d))))
				}
				blk[192+j] = byte(sc)
				step := d * float32(sc)
				for i, v := range xs[16*j : 16*j+16] {
					q := 0.0
					if step != 0 {
						q = min(31, max(-32, math.Round(float64(v/step))))
					}
					L[16*j+i] = uint8(q + 32)
				}
			}
			for h := range 2 {
				for l := range 32 {
					q1, q2, q3, q4 := L[128*h+l], L[128*h+l+32], L[128*h+l+64], L[128*h+l+96]
					blk[64*h+l] = q1&0xf | (q3&0xf)<<4
					blk[64*h+l+32] = q2&0xf | (q4&0xf)<<4
					blk[128+32*h+l] = q1>>4 | (q2>>4)<<2 | (q3>>4)<<4 | (q4>>4)<<6
				}
			}
			blk[208], blk[209] = byte(dBits), byte(dBits>>8)
		}
	},
}

// q6 decodes the four signed 6-bit quants sharing low-bit bytes a (ql[l]),
// b (ql[l+32]) and high-bit byte h (qh[l]).
func q6(a, b, h byte) (q1, q2, q3, q4 int8) {
	q1 = int8(a&0xf|(h&3)<<4) - 32
	q2 = int8(b&0xf|(h>>2&3)<<4) - 32
	q3 = int8(a>>4|(h>>4&3)<<4) - 32
	q4 = int8(b>>4|(h>>6)<<4) - 32
	return
}

func maxOf(v []float32) float32 {
	m := float32(0)
	for _, x := range v {
		m = max(m, x)
	}
	return m
}
