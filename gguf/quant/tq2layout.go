package quant

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// TQ2Layout is a byte arrangement found in files that store type 42
// (TQ2_0_g128). The TQ2_0_g128 Format runs TQ2Standard only; CanonicalTQ2
// rewrites the others where it can.
type TQ2Layout int

const (
	TQ2Standard   TQ2Layout = iota // 34-byte blocks of 128: 32 code bytes, then f16 d
	TQ2ScaleFirst                  // 34-byte blocks of 128: f16 d, then 32 code bytes
	TQ2Group64                     // 18-byte blocks of 64 (Q2_0): f16 d, then 16 code bytes
)

var tq2Layouts = []TQ2Layout{TQ2Standard, TQ2ScaleFirst, TQ2Group64}

func (l TQ2Layout) String() string {
	switch l {
	case TQ2Standard:
		return "standard"
	case TQ2ScaleFirst:
		return "scale-first"
	case TQ2Group64:
		return "group-64"
	}
	return fmt.Sprintf("TQ2Layout(%d)", int(l))
}

// geometry returns the weights per block, bytes per block, and where the
// f16 scale and the code bytes start in a block.
func (l TQ2Layout) geometry() (group, blockBytes, scaleAt, codesAt int) {
	switch l {
	case TQ2ScaleFirst:
		return 128, 34, 0, 2
	case TQ2Group64:
		return 64, 18, 0, 2
	}
	return 128, 34, 32, 0
}

const (
	// tq2MaxPadding bounds the bytes an extent may hold past the tensor.
	// GGUF pads tensor data to general.alignment (32 unless set); 256 allows
	// larger alignments while keeping the layouts' sizes (n*34/128 and
	// n*18/64, n/64 bytes apart) distinguishable from 16384 weights up.
	tq2MaxPadding = 256
	// tq2MaxScaleRatio bounds largest/smallest nonzero block scale. Group
	// absmaxes of one real tensor lie within a few decades; code bytes
	// misread as f16 scatter over f16's whole 2^40 range. The sign and
	// code-3 checks do most of the work; this one catches small tensors.
	tq2MaxScaleRatio = 1 << 20
)

// DetectTQ2 works out the layout of a type-42 tensor of n weights from its
// extent (the bytes available for it, possibly with trailing alignment
// padding). It decides by size first, then by content: every block scale
// must be a finite f16 >= 0, the nonzero ones within a factor 2^20 of
// each other, and no code may be 3, which a quantizer never writes. When no
// layout, or more than one, fits, it returns an error saying why.
func DetectTQ2(extent []byte, n int64) (TQ2Layout, error) {
	if n <= 0 || n%64 != 0 {
		return 0, fmt.Errorf("quant: TQ2_0_g128 tensor of %d elements: count must be a positive multiple of 64", n)
	}
	have := int64(len(extent))
	var sized []TQ2Layout
	var sizes []string
	for _, l := range tq2Layouts {
		group, blockBytes, _, _ := l.geometry()
		if n%int64(group) != 0 {
			sizes = append(sizes, fmt.Sprintf("%v: %d is not a multiple of %d", l, n, group))
			continue
		}
		need := n / int64(group) * int64(blockBytes)
		if need <= have && have-need < tq2MaxPadding {
			sized = append(sized, l)
		}
		sizes = append(sizes, fmt.Sprintf("%v needs %d", l, need))
	}
	if len(sized) == 0 {
		return 0, fmt.Errorf("quant: TQ2_0_g128 tensor of %d elements has %d bytes, which fits no layout (%s; padding under %d bytes allowed)",
			n, have, strings.Join(sizes, ", "), tq2MaxPadding)
	}
	var fits []TQ2Layout
	var reasons []string
	for _, l := range sized {
		group, blockBytes, _, _ := l.geometry()
		if err := l.check(extent[:n/int64(group)*int64(blockBytes)]); err != nil {
			reasons = append(reasons, fmt.Sprintf("as %v, %v", l, err))
			continue
		}
		fits = append(fits, l)
	}
	switch len(fits) {
	case 1:
		return fits[0], nil
	case 0:
		return 0, fmt.Errorf("quant: TQ2_0_g128 tensor of %d elements (%d bytes) is inconsistent with every layout its size allows: %s",
			n, have, strings.Join(reasons, "; "))
	}
	names := make([]string, len(fits))
	for i, l := range fits {
		names[i] = l.String()
	}
	return 0, fmt.Errorf("quant: TQ2_0_g128 tensor of %d elements (%d bytes) is ambiguous: it is consistent with the %s layouts; refusing to guess",
		n, have, strings.Join(names, " and "))
}

// check reports the first thing in data (whole blocks of layout l) that a
// quantizer writing l would not have produced.
func (l TQ2Layout) check(data []byte) error {
	group, blockBytes, scaleAt, codesAt := l.geometry()
	lo, hi := float32(math.Inf(1)), float32(0)
	for b := range len(data) / blockBytes {
		blk := data[b*blockBytes : (b+1)*blockBytes]
		d := halfAt(blk[scaleAt:])
		if math.IsNaN(float64(d)) || math.IsInf(float64(d), 0) {
			return fmt.Errorf("block %d scale is %v", b, d)
		}
		if math.Signbit(float64(d)) {
			return fmt.Errorf("block %d scale %g is negative", b, d)
		}
		if d > 0 {
			lo, hi = min(lo, d), max(hi, d)
		}
		for k, c := range blk[codesAt : codesAt+group/4] {
			if threes := c & (c >> 1) & 0x55; threes != 0 {
				return fmt.Errorf("block %d has code 3 at weight %d", b, 4*k+firstPair(threes))
			}
		}
	}
	if hi == 0 {
		return errors.New("every block scale is 0")
	}
	if hi/lo > tq2MaxScaleRatio {
		return fmt.Errorf("block scales range from %g to %g, more than a factor %d apart", lo, hi, tq2MaxScaleRatio)
	}
	return nil
}

// firstPair returns the index of the lowest 2-bit field whose low bit is set in m.
func firstPair(m byte) int {
	i := 0
	for m&1 == 0 {
		m >>= 2
		i++
	}
	return i
}

// CanonicalTQ2 returns src (whole blocks of the given layout) in the
// standard layout: src itself when already standard, a rearranged copy
// when scale-first, and an error for group-64 data, which cannot be
// regrouped into 128-weight blocks without requantizing.
func CanonicalTQ2(src []byte, layout TQ2Layout) ([]byte, error) {
	switch layout {
	case TQ2Standard:
		return src, nil
	case TQ2ScaleFirst:
		if len(src)%34 != 0 {
			return nil, fmt.Errorf("quant: scale-first TQ2_0_g128 data of %d bytes is not a whole number of 34-byte blocks", len(src))
		}
		out := make([]byte, len(src))
		for b := 0; b < len(src); b += 34 {
			copy(out[b:b+32], src[b+2:b+34])
			copy(out[b+32:b+34], src[b:b+2])
		}
		return out, nil
	case TQ2Group64:
		return nil, errors.New("quant: group-64 Q2_0 layout is not supported: TQ2_0_g128 needs one scale per 128 weights, so the tensor would have to be requantized")
	}
	return nil, fmt.Errorf("quant: unknown TQ2 layout %v", layout)
}
