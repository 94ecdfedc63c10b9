//go:build !amd64

package cpu

var hasVectorSoftmax = false

func maxf32(x *float32, n int, out *[16]float32) {
	panic("cpu: maxf32 has no kernel on this architecture")
}

func expShifted(o, x *float32, n int, m float32, sums *[16]float64) {
	panic("cpu: expShifted has no kernel on this architecture")
}

func swiglu(d, gate, up *float32, n int) {
	panic("cpu: swiglu has no kernel on this architecture")
}

func scalef32(o *float32, n int, s float32) {
	panic("cpu: scalef32 has no kernel on this architecture")
}

func normApply(o, x, gain *float32, n int, s float32) {
	panic("cpu: normApply has no kernel on this architecture")
}
