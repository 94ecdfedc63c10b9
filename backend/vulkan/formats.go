package vulkan

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/stratalab/strata/gguf"
	"github.com/stratalab/strata/gguf/quant"
	"github.com/stratalab/strata/model"
	"github.com/stratalab/strata/shaders"
)

// weightFormat is how one tensor type lives on the device: the shader
// variants that decode it (matmul_<suffix>, embed_<suffix>) and how its
// blocks are repacked on upload. Block formats with one scale are split
// into every block's quants, then every block's f16 scale, so shaders read
// whole aligned words; the K-quants, whose blocks hold several scale
// fields, keep each block whole, padded to whole words; float formats are
// stored as they are. Q4_K is repacked to 4-bit codes with a float32 scale
// and offset per run of 32 (codes4.glsl): 6 bits a weight rather than 4.5,
// for two loads per 8 weights decoded instead of six.
type weightFormat struct {
	typ        gguf.Type
	suffix     string
	blockSize  int // elements per block; 1 for float formats
	blockBytes int
	scaleOff   int  // one-scale block formats: byte offset of the f16 scale in a block
	quantOff   int  // and of the quants
	quantBytes int  // 0 for float formats and whole blocks
	whole      bool // blocks kept whole, each padded to a multiple of 4 bytes
	codes4     bool // repacked as 4-bit codes and a scale and offset per run of 32
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
		{typ: gguf.Q4_K, suffix: "codes4", blockSize: 256, blockBytes: 144, codes4: true},
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
	out := make([]byte, f.imageBytes(int64(blocks)))
	switch {
	case f.codes4:
		return repackCodes4(w, out)
	case f.whole:
		stride := (f.blockBytes + 3) &^ 3
		for b := range blocks {
			copy(out[b*stride:], w.Data[b*f.blockBytes:(b+1)*f.blockBytes])
		}
		return out, 0, nil
	case f.quantBytes == 0:
		copy(out, w.Data)
		return out, 0, nil
	}
	quants := blocks * f.quantBytes
	for b := range blocks {
		blk := w.Data[b*f.blockBytes : (b+1)*f.blockBytes]
		copy(out[b*f.quantBytes:], blk[f.quantOff:f.quantOff+f.quantBytes])
		copy(out[quants+2*b:], blk[f.scaleOff:f.scaleOff+2])
	}
	return out, uint32(quants / 4), nil
}

// WeightBytes is the size of w's image on the device, as Upload repacks it
// (Q4_K takes 4/3 of its file size as 4-bit codes): what a placement plan
// counts for a Vulkan tier (engine.PlanRequest.WeightBytes). A weight
// Upload would refuse counts its size in the file.
func WeightBytes(w *model.Weight) int64 {
	if w == nil {
		return 0
	}
	f, err := formatOf(w)
	if err != nil || w.Rows <= 0 || w.Cols <= 0 || w.Cols%f.blockSize != 0 {
		return int64(len(w.Data))
	}
	return f.imageBytes(int64(w.Rows) * int64(w.Cols/f.blockSize))
}

// imageBytes is the size of repack's image of the given number of blocks.
func (f *weightFormat) imageBytes(blocks int64) int64 {
	switch {
	case f.codes4:
		runs := blocks * int64(f.blockSize/codesRun)
		return runs*codesRun/2 + 8*runs
	case f.whole:
		return blocks * int64((f.blockBytes+3)&^3)
	case f.quantBytes == 0:
		return (blocks*int64(f.blockBytes) + 3) &^ 3
	}
	return blocks*int64(f.quantBytes) + (2*blocks+3)&^3
}

// codesRun is the elements of one scale and offset in the codes4 layout.
const codesRun = 32

// repackCodes4 lays out w in out (imageBytes long) for codes4.glsl: each
// run's 32 codes in 16 bytes (code i in nibble i % 8 of word i / 8), then
// each run's float32 scale and offset. It decodes a row at a time, so the
// scratch is one row's codes whatever the weight's size.
func repackCodes4(w *model.Weight, out []byte) ([]byte, uint32, error) {
	qf, err := quant.For(w.Type())
	if err != nil || qf.Codes == nil || qf.CodeBlock != codesRun {
		return nil, 0, fmt.Errorf("vulkan: tensor %s: %v has no 4-bit codes in runs of %d", w.Name, w.Type(), codesRun)
	}
	runs := w.Rows * w.Cols / codesRun
	scales := out[runs*codesRun/2:]
	rowBytes := w.Cols / qf.BlockSize * qf.BlockBytes
	codes := make([]byte, w.Cols)
	scale, offset := make([]float32, w.Cols/codesRun), make([]float32, w.Cols/codesRun)
	for row := range w.Rows {
		qf.Codes(codes, scale, offset, w.Data[row*rowBytes:(row+1)*rowBytes])
		base := row * w.Cols / codesRun // this row's first run
		for i, c := range codes {
			if c > 15 {
				return nil, 0, fmt.Errorf("vulkan: tensor %s: code %d at row %d, column %d does not fit 4 bits", w.Name, c, row, i)
			}
			out[(row*w.Cols+i)/2] |= c << (4 * (i % 2))
		}
		for r := range scale {
			binary.LittleEndian.PutUint32(scales[8*(base+r):], math.Float32bits(scale[r]))
			binary.LittleEndian.PutUint32(scales[8*(base+r)+4:], math.Float32bits(offset[r]))
		}
	}
	return out, uint32(runs * codesRun / 8), nil
}
