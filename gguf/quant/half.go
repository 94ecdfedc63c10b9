package quant

import (
	"encoding/binary"
	"math"

	"github.com/x448/float16"
)

// halfTable maps every binary16 bit pattern to its float32 value. One
// load per element is about 3x faster in F16 Dot than decoding the bits.
var halfTable = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for h := range t {
		t[h] = float16.Frombits(uint16(h)).Float32()
	}
	return &t
}()

func halfToFloat(h uint16) float32 { return halfTable[h] }

// floatToHalf encodes f as binary16, rounding to nearest even.
func floatToHalf(f float32) uint16 {
	return float16.Fromfloat32(f).Bits()
}

// bfloatToFloat decodes a bfloat16: the top half of a float32.
func bfloatToFloat(b uint16) float32 {
	return math.Float32frombits(uint32(b) << 16)
}

// floatToBFloat encodes f as bfloat16, rounding to nearest even; NaN stays a
// (quiet) NaN instead of rounding into infinity.
func floatToBFloat(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x0040
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// halfAt reads the little-endian binary16 at b[0:2].
func halfAt(b []byte) float32 {
	return halfToFloat(binary.LittleEndian.Uint16(b))
}

// putHalf stores f as little-endian binary16 at b[0:2].
func putHalf(b []byte, f float32) {
	binary.LittleEndian.PutUint16(b, floatToHalf(f))
}

// halfAtLeast returns the smallest binary16 value >= f (f finite, >= 0).
// Scales stored this way never shrink below what the quantizer planned for,
// so no quant falls outside its range.
func halfAtLeast(f float32) uint16 {
	h := floatToHalf(f)
	if halfToFloat(h) < f {
		h++ // next binary16 up: positive values order like their bits
	}
	return h
}
