package cpu

import "golang.org/x/sys/cpu"

var (
	// hasVNNI says gemmI8x32x6 and gemmI4x32x6 can run here.
	hasVNNI = cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VNNI
	// int8AVX2 says the int8 GEMM runs on the AVX2 kernels instead.
	int8AVX2 = !hasVNNI && cpu.X86.HasAVX2 && cpu.X86.HasFMA
	// hasInterleave16 says interleave16 and quantizeRow (AVX-512) can run here.
	hasInterleave16 = cpu.X86.HasAVX512F
)

// hasInt8GEMM says fast precision multiplies quantized weights in int8 here.
func hasInt8GEMM() bool { return hasVNNI || int8AVX2 }

//go:noescape
func gemmI8x32x6(w *byte, wsc *float32, x *int8, ldx int, xsc *float32, ldxsc, blocks, steps int, out *[192]float32)

//go:noescape
func gemmI4x32x6(w *byte, wsc *float32, x *int8, ldx int, xsc *float32, ldxsc, blocks, steps int, out *[192]float32)

//go:noescape
func gemmI8x16x3AVX2(w *byte, wsc *float32, x *int8, ldx int, xsc *float32, ldxsc, blocks, steps, stride int, out *float32)

//go:noescape
func gemmI4lo16x3AVX2(w *byte, wsc *float32, x *int8, ldx int, xsc *float32, ldxsc, blocks, steps, stride int, out *float32)

//go:noescape
func gemmI4hi16x3AVX2(w *byte, wsc *float32, x *int8, ldx int, xsc *float32, ldxsc, blocks, steps, stride int, out *float32)

//go:noescape
func gemmQ8x16x2AVX2(w *byte, wsc *float32, x *int8, ldx int, xsc *float32, ldxsc, blocks, steps, stride int, out *float32)

//go:noescape
func interleave16(dst, src *byte, ld, stride int)

//go:noescape
func quantizeRow(x *float32, q *int8, sc *float32, scStride, blocks, block int)
