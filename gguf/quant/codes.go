package quant

import (
	"encoding/binary"

	"github.com/stratalab/strata/gguf"
)

// The integer view of the block formats, for products in int8: element i of
// a row is scale[i/CodeBlock]*codes[i] - offset[i/CodeBlock]. Every code
// fits in 8 bits unsigned; each product is exact in float32 and the
// difference is rounded once, as Dequantize rounds its own expression, so
// the view gives Dequantize's values bit for bit.

// codesArgs checks the Codes contract and returns the number of blocks.
func codesArgs(t gguf.Type, codes []byte, scale, offset []float32, src []byte, blockSize, blockBytes, codeBlock int) int {
	nb := blocks(t, len(codes), blockSize, len(src), blockBytes)
	if n := len(codes) / codeBlock; len(scale) < n || len(offset) < n {
		panic("quant: " + t.String() + " codes need a scale and an offset per code block")
	}
	return nb
}

// q1Bytes[b] is Q1_0_g128's sign byte b as eight 0/1 bytes, weight 0 lowest.
var q1Bytes = func() (t [256]uint64) {
	for b := range t {
		for i := range 8 {
			t[b] |= uint64(b>>i&1) << (8 * i)
		}
	}
	return t
}()

// tq2Bytes[c] is a TQ2_0_g128 code byte as four codes of d*(code-1): tq2Value
// is -1, 0, 1, 0 for 2-bit codes 0-3, so 3 becomes 1.
var tq2Bytes = func() (t [256]uint32) {
	for c := range t {
		for i := range 4 {
			t[c] |= uint32(tq2Value[c>>(2*i)&3]+1) << (8 * i)
		}
	}
	return t
}()

func q1Codes(codes []byte, scale, offset []float32, src []byte) {
	nb := codesArgs(gguf.Q1_0_G128, codes, scale, offset, src, 128, 18, 128)
	if hasDecodeAVX512 && nb > 0 {
		q1CodesAVX512(&codes[0], &scale[0], &offset[0], &src[0], nb)
		return
	}
	for b := range nb {
		blk := (*[18]byte)(src[18*b:])
		out := codes[128*b : 128*b+128]
		for k := range 16 {
			binary.LittleEndian.PutUint64(out[8*k:], q1Bytes[blk[2+k]])
		}
		d := halfAt(blk[0:2])
		scale[b], offset[b] = 2*d, d
	}
}

func tq2Codes(codes []byte, scale, offset []float32, src []byte) {
	nb := codesArgs(gguf.TQ2_0_G128, codes, scale, offset, src, 128, 34, 128)
	if hasVBMI && nb > 0 {
		tq2CodesAVX512(&codes[0], &scale[0], &offset[0], &src[0], nb)
		return
	}
	for b := range nb {
		blk := (*[34]byte)(src[34*b:])
		out := codes[128*b : 128*b+128]
		for k := range 32 {
			binary.LittleEndian.PutUint32(out[4*k:], tq2Bytes[blk[k]])
		}
		d := halfAt(blk[32:34])
		scale[b], offset[b] = d, d
	}
}

func q8Codes(codes []byte, scale, offset []float32, src []byte) {
	nb := codesArgs(gguf.Q8_0, codes, scale, offset, src, 32, 34, 32)
	if hasDecodeAVX512 && nb > 0 {
		q8CodesAVX512(&codes[0], &scale[0], &offset[0], &src[0], nb)
		return
	}
	for b := range nb {
		blk := (*[34]byte)(src[34*b:])
		out := (*[32]byte)(codes[32*b:])
		for j := range 4 {
			v := binary.LittleEndian.Uint64(blk[2+8*j:])
			binary.LittleEndian.PutUint64(out[8*j:], v^0x8080808080808080) // q+128
		}
		d := halfAt(blk[0:2])
		scale[b], offset[b] = d, 128*d
	}
}

func q4Codes(codes []byte, scale, offset []float32, src []byte) {
	nb := codesArgs(gguf.Q4_0, codes, scale, offset, src, 32, 18, 32)
	if hasDecodeAVX512 && nb > 0 {
		q4CodesAVX512(&codes[0], &scale[0], &offset[0], &src[0], nb)
		return
	}
	for b := range nb {
		blk := (*[18]byte)(src[18*b:])
		out := (*[32]byte)(codes[32*b:])
		for j := range 2 {
			v := binary.LittleEndian.Uint64(blk[2+8*j:])
			binary.LittleEndian.PutUint64(out[8*j:], v&0x0f0f0f0f0f0f0f0f)
			binary.LittleEndian.PutUint64(out[16+8*j:], v>>4&0x0f0f0f0f0f0f0f0f)
		}
		d := halfAt(blk[0:2])
		scale[b], offset[b] = d, 8*d
	}
}

func q4kCodes(codes []byte, scale, offset []float32, src []byte) {
	nb := codesArgs(gguf.Q4_K, codes, scale, offset, src, 256, 144, 32)
	for b := range nb {
		blk := (*[144]byte)(src[144*b:])
		sc, off := kScales((*[16]byte)(blk[:16]))
		copy(scale[8*b:], sc[:])
		copy(offset[8*b:], off[:])
		if hasDecodeAVX512 {
			nibblesAVX512(&codes[256*b], &blk[16], 4)
			continue
		}
		for c := range 4 {
			for j := range 4 {
				v := binary.LittleEndian.Uint64(blk[16+32*c+8*j:])
				binary.LittleEndian.PutUint64(codes[256*b+64*c+8*j:], v&0x0f0f0f0f0f0f0f0f)
				binary.LittleEndian.PutUint64(codes[256*b+64*c+32+8*j:], v>>4&0x0f0f0f0f0f0f0f0f)
			}
		}
	}
}

func q5kCodes(codes []byte, scale, offset []float32, src []byte) {
	nb := codesArgs(gguf.Q5_K, codes, scale, offset, src, 256, 176, 32)
	for b := range nb {
		blk := (*[176]byte)(src[176*b:])
		sc, off := kScales((*[16]byte)(blk[:16]))
		copy(scale[8*b:], sc[:])
		copy(offset[8*b:], off[:])
		if hasDecodeAVX512 {
			q5kCodesAVX512(&codes[256*b], &blk[16], &blk[48])
			continue
		}
		qh := (*[32]byte)(blk[16:])
		for c := range 4 {
			lo, hi := codes[256*b+64*c:][:32], codes[256*b+64*c+32:][:32]
			for l, q := range blk[48+32*c : 80+32*c] {
				h := qh[l] >> (2 * c)
				lo[l] = q&0xf | (h&1)<<4
				hi[l] = q>>4 | (h&2)<<3
			}
		}
	}
}

// q6kCodes gives each weight its unsigned 6-bit quant: q-32 times d*scale
// is q times d*scale less 32 of them.
func q6kCodes(codes []byte, scale, offset []float32, src []byte) {
	nb := codesArgs(gguf.Q6_K, codes, scale, offset, src, 256, 210, 16)
	for b := range nb {
		blk := (*[210]byte)(src[210*b:])
		d := halfAt(blk[208:210])
		for i, s := range blk[192:208] {
			scale[16*b+i] = d * float32(int8(s))
			offset[16*b+i] = 32 * scale[16*b+i]
		}
		if hasDecodeAVX512 {
			q6kCodesAVX512(&codes[256*b], &blk[0])
			continue
		}
		for h := range 2 {
			ql := (*[64]byte)(blk[64*h:])
			qh := (*[32]byte)(blk[128+32*h:])
			o := codes[256*b+128*h:][:128]
			for l := range 32 {
				a, c, hb := ql[l], ql[l+32], qh[l]
				o[l] = a&0xf | (hb&3)<<4
				o[l+32] = c&0xf | (hb>>2&3)<<4
				o[l+64] = a>>4 | (hb>>4&3)<<4
				o[l+96] = c>>4 | (hb>>6)<<4
			}
		}
	}
}
