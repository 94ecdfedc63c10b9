package quant

import (
	"encoding/binary"
	"math"

	"github.com/stratalab/strata/gguf"
)

var formatF32 = Format{
	Type: gguf.F32, BlockSize: 1, BlockBytes: 4,
	Dequantize: func(dst []float32, src []byte) {
		n := blocks(gguf.F32, len(dst), 1, len(src), 4)
		for i := range n {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	},
	Dot: func(w []byte, x []float32) float32 {
		n := blocks(gguf.F32, len(x), 1, len(w), 4)
		w = w[:4*n]
		var s0, s1, s2, s3 float32
		i := 0
		for ; i+4 <= n; i += 4 {
			b := w[4*i : 4*i+16]
			s0 += math.Float32frombits(binary.LittleEndian.Uint32(b[0:4])) * x[i]
			s1 += math.Float32frombits(binary.LittleEndian.Uint32(b[4:8])) * x[i+1]
			s2 += math.Float32frombits(binary.LittleEndian.Uint32(b[8:12])) * x[i+2]
			s3 += math.Float32frombits(binary.LittleEndian.Uint32(b[12:16])) * x[i+3]
		}
		for ; i < n; i++ {
			s0 += math.Float32frombits(binary.LittleEndian.Uint32(w[4*i:])) * x[i]
		}
		return (s0 + s1) + (s2 + s3)
	},
	Quantize: func(dst []byte, src []float32) {
		blocks(gguf.F32, len(src), 1, len(dst), 4)
		for i, v := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	},
}

var formatF16 = Format{
	Type: gguf.F16, BlockSize: 1, BlockBytes: 2,
	Dequantize: func(dst []float32, src []byte) {
		n := blocks(gguf.F16, len(dst), 1, len(src), 2)
		if hasDecodeAVX512 && n > 0 {
			halvesAVX512(&dst[0], &src[0], n)
			return
		}
		for i := range n {
			dst[i] = halfAt(src[2*i:])
		}
	},
	Dot: func(w []byte, x []float32) float32 {
		n := blocks(gguf.F16, len(x), 1, len(w), 2)
		w = w[:2*n]
		var s0, s1, s2, s3 float32
		i := 0
		for ; i+4 <= n; i += 4 {
			b := w[2*i : 2*i+8]
			s0 += halfAt(b[0:2]) * x[i]
			s1 += halfAt(b[2:4]) * x[i+1]
			s2 += halfAt(b[4:6]) * x[i+2]
			s3 += halfAt(b[6:8]) * x[i+3]
		}
		for ; i < n; i++ {
			s0 += halfAt(w[2*i:]) * x[i]
		}
		return (s0 + s1) + (s2 + s3)
	},
	Quantize: func(dst []byte, src []float32) {
		blocks(gguf.F16, len(src), 1, len(dst), 2)
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], floatToHalf(v))
		}
	},
}

var formatBF16 = Format{
	Type: gguf.BF16, BlockSize: 1, BlockBytes: 2,
	Dequantize: func(dst []float32, src []byte) {
		n := blocks(gguf.BF16, len(dst), 1, len(src), 2)
		for i := range n {
			dst[i] = bfloatToFloat(binary.LittleEndian.Uint16(src[2*i:]))
		}
	},
	Dot: func(w []byte, x []float32) float32 {
		n := blocks(gguf.BF16, len(x), 1, len(w), 2)
		w = w[:2*n]
		var s0, s1, s2, s3 float32
		i := 0
		for ; i+4 <= n; i += 4 {
			b := w[2*i : 2*i+8]
			s0 += bfloatToFloat(binary.LittleEndian.Uint16(b[0:2])) * x[i]
			s1 += bfloatToFloat(binary.LittleEndian.Uint16(b[2:4])) * x[i+1]
			s2 += bfloatToFloat(binary.LittleEndian.Uint16(b[4:6])) * x[i+2]
			s3 += bfloatToFloat(binary.LittleEndian.Uint16(b[6:8])) * x[i+3]
		}
		for ; i < n; i++ {
			s0 += bfloatToFloat(binary.LittleEndian.Uint16(w[2*i:])) * x[i]
		}
		return (s0 + s1) + (s2 + s3)
	},
	Quantize: func(dst []byte, src []float32) {
		blocks(gguf.BF16, len(src), 1, len(dst), 2)
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], floatToBFloat(v))
		}
	},
}
