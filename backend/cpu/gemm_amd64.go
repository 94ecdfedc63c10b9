package cpu

import "golang.org/x/sys/cpu"

// hasPanelGEMM says the AVX-512 kernels below can run here.
var hasPanelGEMM = cpu.X86.HasAVX512F

// gemm32x12 writes to tile[i*32+r] the products of 32 rows of x, packed
// k-major (xt[kk*32+r]), with 12 weight rows (row i at w[i*ldw:]), over k
// steps. Each output is summed in its own lane, k in order, in blocks of
// 256 that are summed from zero and then added up.
//
//go:noescape
func gemm32x12(xt, w *float32, ldw, k int, tile *[384]float32)

// gemm16x12 is gemm32x12 for 16 rows of x (xt[kk*16+r], tile[i*16+r]),
// each output summed exactly as gemm32x12 sums it.
//
//go:noescape
func gemm16x12(xt, w *float32, ldw, k int, tile *[192]float32)

// gemv64 multiplies one row of x with 64 weight rows stored k-major
// (wt[kk*64+i]), each output summed as gemm32x12 sums it.
//
//go:noescape
func gemv64(wt, x *float32, k int, out *[64]float32)
