//go:build !amd64

package cpu

var hasPanelGEMM = false

func gemm32x12(xt, w *float32, ldw, k int, tile *[384]float32) {
	panic("cpu: gemm32x12 has no kernel on this architecture")
}

func gemm16x12(xt, w *float32, ldw, k int, tile *[192]float32) {
	panic("cpu: gemm16x12 has no kernel on this architecture")
}

var hasVNNI, int8AVX2, hasInterleave16 = false, false, false

func hasInt8GEMM() bool { return false }

func gemmI8x32x6(w *byte, wsc *float32, x *int8, ldx int, xsc *float32, ldxsc, blocks, steps int, out *[192]float32) {
	panic("cpu: gemmI8x32x6 has no kernel on this architecture")
}

func gemmI4x32x6(w *byte, wsc *float32, x *int8, ldx int, xsc *float32, ldxsc, blocks, steps int, out *[192]float32) {
	panic("cpu: gemmI4x32x6 has no kernel on this architecture")
}

func gemmI8x16x3AVX2(w *byte, wsc *float32, x *int8, ldx int, xsc *float32, ldxsc, blocks, steps, stride int, out *float32) {
	panic("cpu: gemmI8x16x3AVX2 has no kernel on this architecture")
}

func gemmI4lo16x3AVX2(w *byte, wsc *float32, x *int8, ldx int, xsc *float32, ldxsc, blocks, steps, stride int, out *float32) {
	panic("cpu: gemmI4lo16x3AVX2 has no kernel on this architecture")
}

func gemmI4hi16x3AVX2(w *byte, wsc *float32, x *int8, ldx int, xsc *float32, ldxsc, blocks, steps, stride int, out *float32) {
	panic("cpu: gemmI4hi16x3AVX2 has no kernel on this architecture")
}

func gemmQ8x16x2AVX2(w *byte, wsc *float32, x *int8, ldx int, xsc *float32, ldxsc, blocks, steps, stride int, out *float32) {
	panic("cpu: gemmQ8x16x2AVX2 has no kernel on this architecture")
}

func interleave16(dst, src *byte, ld, stride int) {
	panic("cpu: interleave16 has no kernel on this architecture")
}

func quantizeRow(x *float32, q *int8, sc *float32, scStride, blocks, block int) {
	panic("cpu: quantizeRow has no kernel on this architecture")
}

func gemv64(wt, x *float32, k int, out *[64]float32) {
	panic("cpu: gemv64 has no kernel on this architecture")
}
