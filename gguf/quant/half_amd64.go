package quant

import "golang.org/x/sys/cpu"

// hasHalvesAVX512 says halvesAVX512 can run here (VMOVDQU16 is AVX-512 BW).
var hasHalvesAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW

// halvesAVX512 converts n (>= 1) little-endian binary16 values at src to
// float32 at dst with VCVTPH2PS: exact, as every binary16 is a float32.
//
//go:noescape
func halvesAVX512(dst *float32, src *byte, n int)
