//go:build !amd64

package quant

var hasHalvesAVX512 = false

func halvesAVX512(dst *float32, src *byte, n int) {
	panic("quant: halvesAVX512 has no kernel on this architecture")
}
