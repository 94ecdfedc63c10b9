//go:build !amd64

package cpu

var hasPanelGEMM = false

func gemm32x12(xt, w *float32, ldw, k int, tile *[384]float32) {
	panic("cpu: gemm32x12 has no kernel on this architecture")
}

func gemm16x12(xt, w *float32, ldw, k int, tile *[192]float32) {
	panic("cpu: gemm16x12 has no kernel on this architecture")
}
