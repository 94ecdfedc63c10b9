package cpu

import "golang.org/x/sys/cpu"

// hasVectorSoftmax says the AVX-512 kernels below (softmax, SwiGLU; their
// tail masks use BMI2) can run here.
var hasVectorSoftmax = cpu.X86.HasAVX512F && cpu.X86.HasBMI2

// maxf32 writes to out the lane-wise maxima of x[:n] (n >= 1), lane i%16,
// NaN in a lane that saw one.
//
//go:noescape
func maxf32(x *float32, n int, out *[16]float32)

// expShifted writes o[i] = exp(x[i] - m) for i < n (n >= 1), 0 where
// x[i] - m is below -87.3, and to sums the float64 sums of lanes i%16.
//
//go:noescape
func expShifted(o, x *float32, n int, m float32, sums *[16]float64)

// swiglu writes d[i] = gate[i] / (1 + exp(-gate[i])) * up[i] for i < n (n >= 1).
//
//go:noescape
func swiglu(d, gate, up *float32, n int)

// scalef32 multiplies o[:n] (n >= 1) by s.
//
//go:noescape
func scalef32(o *float32, n int, s float32)

// normApply writes o[i] = x[i]*s*gain[i] for i < n (n >= 1), multiplied in
// that order.
//
//go:noescape
func normApply(o, x, gain *float32, n int, s float32)
