package quant

import "golang.org/x/sys/cpu"

// hasDecodeAVX512 says the AVX-512 decoders below can run here (VMOVDQU16
// is AVX-512 BW).
var hasDecodeAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL

// halvesAVX512 converts n (>= 1) little-endian binary16 values at src to
// float32 at dst with VCVTPH2PS: exact, as every binary16 is a float32.
//
//go:noescape
func halvesAVX512(dst *float32, src *byte, n int)

// q8BlocksAVX512 decodes blocks (>= 1) Q8_0 blocks at src to dst, each
// weight float32(q) * d as formatQ8_0's Go loop makes it.
//
//go:noescape
func q8BlocksAVX512(dst *float32, src *byte, blocks int)

// q4kBlockAVX512 decodes one Q4_K block's 128 quant bytes to 256 weights,
// scale[s] * q - offset[s] for sub-block s, as formatQ4_K's Go loop does.
//
//go:noescape
func q4kBlockAVX512(out *float32, qs *byte, scale, offset *[8]float32)

// q1BlocksAVX512 decodes blocks (>= 1) Q1_0_g128 blocks at src to dst, each
// weight d or d with its sign flipped, as formatQ1_0's Go loop makes it.
//
//go:noescape
func q1BlocksAVX512(dst *float32, src *byte, blocks int)

// tq2BlocksAVX512 decodes blocks (>= 1) TQ2_0_g128 blocks at src to dst,
// each weight d * tq2Value[code], as formatTQ2_0's Go loop makes it.
//
//go:noescape
func tq2BlocksAVX512(dst *float32, src *byte, blocks int)

// q4BlocksAVX512 decodes blocks (>= 1) Q4_0 blocks at src to dst, as
// formatQ4_0's Go loop does.
//
//go:noescape
func q4BlocksAVX512(dst *float32, src *byte, blocks int)

// q6kBlockAVX512 decodes one Q6_K block to 256 weights, scales[i] being d
// times the block's int8 scale i, as formatQ6_K's Go loop does.
//
//go:noescape
func q6kBlockAVX512(out *float32, blk *byte, scales *[16]float32)

// hasVBMI says tq2CodesAVX512 (VPMULTISHIFTQB) can run here.
var hasVBMI = hasDecodeAVX512 && cpu.X86.HasAVX512VBMI

// The codes decoders write blocks (>= 1) blocks' codes, scales and offsets
// as codes.go's Go loops do.
//
//go:noescape
func q1CodesAVX512(codes *byte, scale, offset *float32, src *byte, blocks int)

//go:noescape
func tq2CodesAVX512(codes *byte, scale, offset *float32, src *byte, blocks int)

//go:noescape
func q8CodesAVX512(codes *byte, scale, offset *float32, src *byte, blocks int)

//go:noescape
func q4CodesAVX512(codes *byte, scale, offset *float32, src *byte, blocks int)

// nibblesAVX512 splits runs (>= 1) 32-byte runs of Q4_K quants into 64
// codes each, low nibbles first.
//
//go:noescape
func nibblesAVX512(codes *byte, qs *byte, runs int)

// q6kCodesAVX512 writes one Q6_K block's 256 codes (its unsigned quants).
//
//go:noescape
func q6kCodesAVX512(codes *byte, blk *byte)

// q5kCodesAVX512 writes one Q5_K block's 256 codes from its qh and qs.
//
//go:noescape
func q5kCodesAVX512(codes *byte, qh, qs *byte)

// codesBlockAVX512 decodes a K-quant block's 256 codes to weights,
// scale[s] * q - offset[s] for sub-block s of 32, as formatQ5_K's Go loop does.
//
//go:noescape
func codesBlockAVX512(out *float32, codes *byte, scale, offset *[8]float32)
