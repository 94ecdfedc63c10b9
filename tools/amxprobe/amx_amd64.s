//go:build linux && amd64

#include "textflag.h"

// func tileMul(cfg *[64]byte, a, b *int8, c *int32)
// C(16x16 int32) = A(16x64 int8) x B(16 rows x 64 bytes, VNNI layout), by TDPBSSD.
TEXT ·tileMul(SB), NOSPLIT, $0-32
	MOVQ cfg+0(FP), AX
	BYTE $0xC4; BYTE $0xE2; BYTE $0x78; BYTE $0x49; BYTE $0x00 // ldtilecfg [rax]
	MOVQ $64, BX
	MOVQ a+8(FP), AX
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x0C; BYTE $0x18 // tileloadd tmm1, [rax+rbx]
	MOVQ b+16(FP), AX
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x14; BYTE $0x18 // tileloadd tmm2, [rax+rbx]
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xC0 // tilezero tmm0
	BYTE $0xC4; BYTE $0xE2; BYTE $0x6B; BYTE $0x5E; BYTE $0xC1 // tdpbssd tmm0, tmm1, tmm2
	MOVQ c+24(FP), AX
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7A; BYTE $0x4B; BYTE $0x04; BYTE $0x18 // tilestored [rax+rbx], tmm0
	BYTE $0xC4; BYTE $0xE2; BYTE $0x78; BYTE $0x49; BYTE $0xC0 // tilerelease
	RET

// func tileLoop(cfg *[64]byte, a, b *int8, n int)
// n iterations of four TDPBSSD into tmm0..3 from A tiles tmm4,5 and B tiles tmm6,7.
TEXT ·tileLoop(SB), NOSPLIT, $0-32
	MOVQ cfg+0(FP), AX
	BYTE $0xC4; BYTE $0xE2; BYTE $0x78; BYTE $0x49; BYTE $0x00 // ldtilecfg [rax]
	MOVQ $64, BX
	MOVQ a+8(FP), AX
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x24; BYTE $0x18 // tileloadd tmm4, [rax+rbx]
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x2C; BYTE $0x18 // tileloadd tmm5, [rax+rbx]
	MOVQ b+16(FP), AX
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x34; BYTE $0x18 // tileloadd tmm6, [rax+rbx]
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x3C; BYTE $0x18 // tileloadd tmm7, [rax+rbx]
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xC0 // tilezero tmm0
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xC8 // tilezero tmm1
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xD0 // tilezero tmm2
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xD8 // tilezero tmm3
	MOVQ n+24(FP), CX
loop:
	BYTE $0xC4; BYTE $0xE2; BYTE $0x4B; BYTE $0x5E; BYTE $0xC4 // tdpbssd tmm0, tmm4, tmm6
	BYTE $0xC4; BYTE $0xE2; BYTE $0x43; BYTE $0x5E; BYTE $0xCC // tdpbssd tmm1, tmm4, tmm7
	BYTE $0xC4; BYTE $0xE2; BYTE $0x4B; BYTE $0x5E; BYTE $0xD5 // tdpbssd tmm2, tmm5, tmm6
	BYTE $0xC4; BYTE $0xE2; BYTE $0x43; BYTE $0x5E; BYTE $0xDD // tdpbssd tmm3, tmm5, tmm7
	DECQ CX
	JNZ loop
	BYTE $0xC4; BYTE $0xE2; BYTE $0x78; BYTE $0x49; BYTE $0xC0 // tilerelease
	RET
