package vulkan

import (
	"fmt"
	"strings"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/shaders"
)

// weightFormat is how one tensor type lives on the device: the shader
// variants that decode it (matmul_<suffix>, embed_<suffix>) and how its
// blocks are repacked on upload. Block formats with one scale are split
// into every block's quants, then every block's f16 scale, so shaders read
// whole aligned words; the K-quants, whose blocks hold several scale
// fields, keep each block whole, padded to whole words; float formats are
// stored as they are.
type weightFormat struct {
	typ        gguf.Type
	suffix     string
	blockSize  int // elements per block; 1 for float formats
	blockBytes int
	scaleOff   int  // one-scale block formats: byte offset of the f16 scale in a block
	quantOff   int  // and of the quants
	quantBytes int  // 0 for float formats and whole blocks
	whole      bool // blocks kept whole, each padded to a multiple of 4 bytes
}

// exactInHalf says every weight of the format is exact in float16, so that
// the cooperative-matrix GEMM decodes it in its tiles at either precision
// as it is; other formats are rounded (fast) or split in hi + lo halves
// (exact), first (weights16.comp) or in the tiles.
func (f *weightFormat) exactInHalf() bool { return shaders.ExactInHalf(f.suffix) }

// weightFormats are the formats the shaders decode.
func weightFormats() []weightFormat {
	return []weightFormat{
		{typ: gguf.F32, suffix: "f32", blockSize: 1, blockBytes: 4},
		{typ: gguf.F16, suffix: "f16", blockSize: 1, blockBytes: 2},
		{typ: gguf.BF16, suffix: "bf16", blockSize: 1, blockBytes: 2},
		{typ: gguf.Q8_0, suffix: "q8_0", blockSize: 32, blockBytes: 34, scaleOff: 0, quantOff: 2, quantBytes: 32},
		{typ: gguf.Q4_0, suffix: "q4_0", blockSize: 32, blockBytes: 18, scaleOff: 0, quantOff: 2, quantBytes: 16},
		{typ: gguf.Q1_0_G128, suffix: "q1_0", blockSize: 128, blockBytes: 18, scaleOff: 0, quantOff: 2, quantBytes: 16},
		{typ: gguf.TQ2_0_G128, suffix: "tq2_0", blockSize: 128, blockBytes: 34, scaleOff: 32, quantOff: 0, quantBytes: 32},
		{typ: gguf.Q4_K, suffix: "q4_k", blockSize: 256, blockBytes: 144, whole: true},
		{typ: gguf.Q5_K, suffix: "q5_k", blockSize: 256, blockBytes: 176, whole: true},
		{typ: gguf.Q6_K, suffix: "q6_k", blockSize: 256, blockBytes: 210, whole: true},
	}
}

func formatOf(w *model.Weight) (*weightFormat, error) {
	fs := weightFormats()
	for i := range fs {
		if fs[i].typ == w.Type() {
			return &fs[i], nil
		}
	}
	var names []string
	for _, f := range fs {
		names = append(names, f.typ.String())
	}
	return nil, fmt.Errorf("vulkan: tensor %s has type %v, which has no Vulkan shader (supported: %s)", w.Name, w.Type(), strings.Join(names, ", "))
}

// repack returns the weight's device image and the word at which its block
// scales start (0 for float formats). The weight's geometry is checked
// first, so a short or ragged tensor is an error, not an out-of-bounds read.
func (f *weightFormat) repack(w *model.Weight) ([]byte, uint32, error) {
	if w.Rows <= 0 || w.Cols <= 0 || w.Cols%f.blockSize != 0 {
		return nil, 0, fmt.Errorf("vulkan: tensor %s: %d x %d is not a whole number of %v blocks of %d", w.Name, w.Rows, w.Cols, f.typ, f.blockSize)
	}
	blocks := w.Rows * (w.Cols / f.blockSize)
	if need := blocks * f.blockBytes; len(w.Data) < need {
		return nil, 0, fmt.Errorf("vulkan: tensor %s: %d x %d %v needs %d bytes, the file has %d", w.Name, w.Rows, w.Cols, f.typ, need, len(w.Data))
	}
	if f.whole {
		stride := (f.blockBytes + 3) &^ 3
		out := make([]byte, blocks*stride)
		for b := range blocks {
			copy(out[b*stride:], w.Data[b*f.blockBytes:(b+1)*f.blockBytes])
		}
		return out, 0, nil
	}
	if f.quantBytes == 0 {
		out := make([]byte, (blocks*f.blockBytes+3)&^3)
		copy(out, w.Data)
		return out, 0, nil
	}
	quants := blocks * f.quantBytes
	out := make([]byte, quants+(2*blocks+3)&^3)
	for b := range blocks {
		blk := w.Data[b*f.blockBytes : (b+1)*f.blockBytes]
		copy(out[b*f.quantBytes:], blk[f.quantOff:f.quantOff+f.quantBytes])
		copy(out[quants+2*b:], blk[f.scaleOff:f.scaleOff+2])
	}
	return out, uint32(quants / 4), nil
}
