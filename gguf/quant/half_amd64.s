#include "textflag.h"

// func halvesAVX512(dst *float32, src *byte, n int)
//
// dst[i] = the binary16 at src[2i:] for i < n (n >= 1), 16 at a time, the
// last partial vector under a mask.
TEXT ·halvesAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

loop:
	MOVQ $0xFFFF, AX
	CMPQ CX, $16
	JGE  full
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX

full:
	KMOVW      AX, K1
	VMOVDQU16.Z (SI), K1, Y0
	VCVTPH2PS  Y0, Z1
	VMOVUPS    Z1, K1, (DI)
	ADDQ       $32, SI
	ADDQ       $64, DI
	SUBQ       $16, CX
	JG         loop
	VZEROUPPER
	RET
