// Package quant describes the tensor block formats Strata can run: how each
// decodes to float32, dots against a float32 vector, and encodes from
// float32. Each format is one Format value. Layouts are ggml's
// (ggml-common.h, ggml-quants.c), plus the Bonsai engines' 128-weight 1-bit
// and ternary formats (types 41 and 42).
package quant

import (
	"fmt"
	"strings"

	"github.com/stratalab/strata/gguf"
)

// Format is one block format. The functions work on whole rows: the element
// count must be a multiple of BlockSize and the packed side must hold at
// least count/BlockSize*BlockBytes bytes. Breaking that is a caller bug
// (tensor geometry is validated when a file is read), so it panics with a
// message naming the format and the sizes.
type Format struct {
	Type       gguf.Type
	BlockSize  int // elements per block
	BlockBytes int
	// Dequantize decodes len(dst) elements (a multiple of BlockSize) from packed src.
	Dequantize func(dst []float32, src []byte)
	// Dot returns sum_i x[i]*w[i] for a packed row w of len(x) elements,
	// decoding block by block (no full-row buffer).
	Dot func(w []byte, x []float32) float32
	// Quantize encodes src (a multiple of BlockSize) into dst (Type.RowBytes long).
	Quantize func(dst []byte, src []float32)
	// Codes, for the integer formats (nil for float types), decodes
	// len(codes) elements (a multiple of BlockSize) to 8-bit unsigned codes
	// and a scale and offset per CodeBlock elements: element i is
	// scale[i/CodeBlock]*codes[i] - offset[i/CodeBlock], as Dequantize gives it.
	Codes     func(codes []byte, scale, offset []float32, src []byte)
	CodeBlock int
}

// formats lists every supported format in type-id order.
var formats = []Format{
	formatF32, formatF16, formatQ4_0, formatQ8_0, formatQ4_K, formatQ5_K,
	formatQ6_K, formatBF16, formatQ1_0, formatTQ2_0,
}

// For returns the format of type t, or an error naming t when Strata cannot run it.
func For(t gguf.Type) (*Format, error) {
	for i := range formats {
		if formats[i].Type == t {
			f := formats[i] // a copy, so callers cannot alter the table
			return &f, nil
		}
	}
	names := make([]string, len(formats))
	for i, f := range formats {
		names[i] = f.Type.String()
	}
	return nil, fmt.Errorf("quant: tensor type %v is not supported (supported: %s)", t, strings.Join(names, ", "))
}

// Supported lists the types For accepts, in type-id order.
func Supported() []gguf.Type {
	ts := make([]gguf.Type, len(formats))
	for i, f := range formats {
		ts[i] = f.Type
	}
	return ts
}

// blocks returns n/blockSize after checking the Format contract: n is a
// whole number of blocks and the packed side has room for them.
func blocks(t gguf.Type, n, blockSize, packed, blockBytes int) int {
	if n < 0 || n%blockSize != 0 {
		panic(fmt.Sprintf("quant: %v row of %d elements is not a whole number of %d-element blocks", t, n, blockSize))
	}
	nb := n / blockSize
	if packed < nb*blockBytes {
		panic(fmt.Sprintf("quant: %v row of %d elements needs %d packed bytes, got %d", t, n, nb*blockBytes, packed))
	}
	return nb
}
