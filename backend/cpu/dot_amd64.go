package cpu

import "golang.org/x/sys/cpu"

// hasBlockDot says the AVX2 and FMA kernel below can run here.
var hasBlockDot = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// dot4x2 writes the 8 dot products of 4 weight rows with 2 input rows, of
// n elements each (n a multiple of 8), as out[2*i+t] = w_i · x_t, each row
// summed in 8 lanes with fused multiply-adds.
//
//go:noescape
func dot4x2(w0, w1, w2, w3, x0, x1 *float32, n int, out *[8]float32)

// dot4x1 is dot4x2 for one input row, into out[0], out[2], out[4], out[6],
// each sum made exactly as dot4x2 makes it.
//
//go:noescape
func dot4x1(w0, w1, w2, w3, x0 *float32, n int, out *[8]float32)
