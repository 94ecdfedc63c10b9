package cpu

import "golang.org/x/sys/cpu"

// hasInt8GEMM says gemmI8x32x6 can run here.
var hasInt8GEMM = cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VNNI

//go:noescape
func gemmI8x32x6(w *byte, wsc *float32, x *int8, ldx int, xsc *float32, ldxsc, blocks, steps int, out *[192]float32)

//go:noescape
func gemmI4x32x6(w *byte, wsc *float32, x *int8, ldx int, xsc *float32, ldxsc, blocks, steps int, out *[192]float32)

//go:noescape
func interleave16(dst, src *byte, ld, stride int)

//go:noescape
func quantizeRow(x *float32, q *int8, sc *float32, scStride, blocks, block int)
