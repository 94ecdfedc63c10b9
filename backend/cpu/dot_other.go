//go:build !amd64

package cpu

var hasBlockDot = false

func dot4x2(w0, w1, w2, w3, x0, x1 *float32, n int, out *[8]float32) {
	panic("cpu: dot4x2 has no kernel on this architecture")
}

func dot4x1(w0, w1, w2, w3, x0 *float32, n int, out *[8]float32) {
	panic("cpu: dot4x1 has no kernel on this architecture")
}
