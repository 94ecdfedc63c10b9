#include "textflag.h"

// The int8 GEMM on AVX2, where AVX-512 VNNI is not: 16 weight rows by 3
// rows of x, from the weights gemmI8x32x6 (or gemmI4x32x6) reads, each
// call taking half of its 32 rows. VPMADDUBSW multiplies a step's unsigned
// codes by x's int8 and adds them in pairs to int16, VPMADDWD by ones adds
// the pairs to int32: what VPDPBUSD does in one. A pair is at most
// 2*63*127 = 16002, so codes of up to 6 bits never saturate int16; Q8_0's
// codes (up to 255) would, and it is not multiplied here.
//
// Each block ends as in gemmI8x32x6:
//
//	acc += xscale*(wscale*sum(code*q)) - woffset*(xscale*sum(q))
//
// Registers: Y0-Y5 int32 sums (row r of x: Y(2r) weight rows 0-7, Y(2r+1)
// rows 8-15), Y6-Y11 float32 sums alike, Y12-Y13 the step's codes, Y14 x,
// Y15 a product. AX walks w (R14 bytes a step), SI x (BX = ldx), R8 wsc
// (this half's scales at 0 and 32, offsets at 128 and 160, 256 bytes a
// block), R10 xsc (a pair a row, the next block R11 bytes on), CX the
// steps left in a block, R12 the blocks left, R9 out (3 rows of 16, 128
// bytes apart).

DATA ones16<>+0(SB)/8, $0x0001000100010001
DATA ones16<>+8(SB)/8, $0x0001000100010001
DATA ones16<>+16(SB)/8, $0x0001000100010001
DATA ones16<>+24(SB)/8, $0x0001000100010001
GLOBL ones16<>(SB), RODATA|NOPTR, $32
DATA low4<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA low4<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA low4<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA low4<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL low4<>(SB), RODATA|NOPTR, $32

#define ENTRY \
	MOVQ w+0(FP), AX; \
	MOVQ wsc+8(FP), R8; \
	MOVQ x+16(FP), SI; \
	MOVQ ldx+24(FP), BX; \
	MOVQ xsc+32(FP), R10; \
	MOVQ ldxsc+40(FP), R11; \
	MOVQ blocks+48(FP), R12; \
	MOVQ steps+56(FP), R13; \
	MOVQ stride+64(FP), R14; \
	MOVQ out+72(FP), R9; \
	VPXOR Y0, Y0, Y0; \
	VPXOR Y1, Y1, Y1; \
	VPXOR Y2, Y2, Y2; \
	VPXOR Y3, Y3, Y3; \
	VPXOR Y4, Y4, Y4; \
	VPXOR Y5, Y5, Y5; \
	VPXOR Y6, Y6, Y6; \
	VPXOR Y7, Y7, Y7; \
	VPXOR Y8, Y8, Y8; \
	VPXOR Y9, Y9, Y9; \
	VPXOR Y10, Y10, Y10; \
	VPXOR Y11, Y11, Y11

// One row of x (4 bytes at xoff(SI)) times the step's codes into I0, I1.
#define ROW(xoff, I0, I1) \
	VPBROADCASTD xoff, Y14; \
	VPMADDUBSW Y14, Y12, Y15; \
	VPMADDWD ones16<>(SB), Y15, Y15; \
	VPADDD Y15, I0, I0; \
	VPMADDUBSW Y14, Y13, Y15; \
	VPMADDWD ones16<>(SB), Y15, Y15; \
	VPADDD Y15, I1, I1

#define ROWS \
	ROW((SI), Y0, Y1); \
	ROW((SI)(BX*1), Y2, Y3); \
	ROW((SI)(BX*2), Y4, Y5); \
	ADDQ $4, SI; \
	ADDQ R14, AX

#define FIN2(off, I, S, F) \
	VCVTDQ2PS I, I; \
	VMULPS S(R8), I, I; \
	VBROADCASTSS off(R10), Y15; \
	VFMADD231PS Y15, I, F; \
	VBROADCASTSS off+4(R10), Y15; \
	VFNMADD231PS S+128(R8), Y15, F; \
	VPXOR I, I, I

#define FINISH \
	FIN2(0, Y0, 0, Y6); \
	FIN2(0, Y1, 32, Y7); \
	FIN2(8, Y2, 0, Y8); \
	FIN2(8, Y3, 32, Y9); \
	FIN2(16, Y4, 0, Y10); \
	FIN2(16, Y5, 32, Y11); \
	ADDQ $256, R8; \
	ADDQ R11, R10

#define STORE \
	VMOVUPS Y6, 0(R9); \
	VMOVUPS Y7, 32(R9); \
	VMOVUPS Y8, 128(R9); \
	VMOVUPS Y9, 160(R9); \
	VMOVUPS Y10, 256(R9); \
	VMOVUPS Y11, 288(R9); \
	VZEROUPPER

// gemmI8x16x3AVX2 reads a code a byte: 16 rows of a step at w, w+32.
//
// func gemmI8x16x3AVX2(w *byte, wsc *float32, x *int8, ldx int, xsc *float32, ldxsc, blocks, steps, stride int, out *float32)
TEXT ·gemmI8x16x3AVX2(SB), NOSPLIT, $0-80
	ENTRY

bblock:
	MOVQ R13, CX

bstep:
	VMOVDQU (AX), Y12
	VMOVDQU 32(AX), Y13
	ROWS
	DECQ CX
	JNZ  bstep
	FINISH
	DECQ R12
	JNZ  bblock
	STORE
	RET

// gemmI4lo16x3AVX2 reads the low nibbles of a step's 64 bytes at w: rows
// 0-15 of gemmI4x32x6's 32.
//
// func gemmI4lo16x3AVX2(w *byte, wsc *float32, x *int8, ldx int, xsc *float32, ldxsc, blocks, steps, stride int, out *float32)
TEXT ·gemmI4lo16x3AVX2(SB), NOSPLIT, $0-80
	ENTRY

lblock:
	MOVQ R13, CX

lstep:
	VMOVDQU (AX), Y12
	VMOVDQU 32(AX), Y13
	VPAND   low4<>(SB), Y12, Y12
	VPAND   low4<>(SB), Y13, Y13
	ROWS
	DECQ CX
	JNZ  lstep
	FINISH
	DECQ R12
	JNZ  lblock
	STORE
	RET

// gemmI4hi16x3AVX2 reads the high nibbles: rows 16-31.
//
// func gemmI4hi16x3AVX2(w *byte, wsc *float32, x *int8, ldx int, xsc *float32, ldxsc, blocks, steps, stride int, out *float32)
TEXT ·gemmI4hi16x3AVX2(SB), NOSPLIT, $0-80
	ENTRY

hblock:
	MOVQ R13, CX

hstep:
	VMOVDQU (AX), Y12
	VMOVDQU 32(AX), Y13
	VPSRLW  $4, Y12, Y12
	VPSRLW  $4, Y13, Y13
	VPAND   low4<>(SB), Y12, Y12
	VPAND   low4<>(SB), Y13, Y13
	ROWS
	DECQ CX
	JNZ  hstep
	FINISH
	DECQ R12
	JNZ  hblock
	STORE
	RET

DATA signbit8<>+0(SB)/8, $0x8080808080808080
DATA signbit8<>+8(SB)/8, $0x8080808080808080
DATA signbit8<>+16(SB)/8, $0x8080808080808080
DATA signbit8<>+24(SB)/8, $0x8080808080808080
GLOBL signbit8<>(SB), RODATA|NOPTR, $32

// One row of x for gemmQ8x16x2AVX2: x takes the signs of q (VPSIGNB) so
// that VPMADDUBSW can multiply it by |q|: a pair is at most 2*128*127.
#define ROWQ(xoff, I0, I1) \
	VPBROADCASTD xoff, Y12; \
	VPSIGNB Y8, Y12, Y13; \
	VPMADDUBSW Y13, Y10, Y14; \
	VPMADDWD ones16<>(SB), Y14, Y14; \
	VPADDD Y14, I0, I0; \
	VPSIGNB Y9, Y12, Y13; \
	VPMADDUBSW Y13, Y11, Y14; \
	VPMADDWD ones16<>(SB), Y14, Y14; \
	VPADDD Y14, I1, I1

// Q8_0's block end: its sums are of q*x (q = code-128), so no offset.
#define FINQ(off, I, S, F) \
	VCVTDQ2PS I, I; \
	VMULPS S(R8), I, I; \
	VBROADCASTSS off(R10), Y14; \
	VFMADD231PS Y14, I, F; \
	VPXOR I, I, I

// gemmQ8x16x2AVX2 is gemmI8x16x3AVX2 for Q8_0 (codes q+128, up to 255,
// whose pairs would saturate int16), over 2 rows of x: it multiplies the
// signed q, |q| by x with q's signs. Registers: Y0-Y3 int32 sums (row r:
// Y(2r), Y(2r+1)), Y4-Y7 float32 sums alike, Y8-Y9 q, Y10-Y11 |q|, Y12 x,
// Y13-Y14 products, Y15 the sign bits. out: 2 rows of 16, 128 bytes apart.
//
// func gemmQ8x16x2AVX2(w *byte, wsc *float32, x *int8, ldx int, xsc *float32, ldxsc, blocks, steps, stride int, out *float32)
TEXT ·gemmQ8x16x2AVX2(SB), NOSPLIT, $0-80
	MOVQ w+0(FP), AX
	MOVQ wsc+8(FP), R8
	MOVQ x+16(FP), SI
	MOVQ ldx+24(FP), BX
	MOVQ xsc+32(FP), R10
	MOVQ ldxsc+40(FP), R11
	MOVQ blocks+48(FP), R12
	MOVQ steps+56(FP), R13
	MOVQ stride+64(FP), R14
	MOVQ out+72(FP), R9
	VMOVDQU signbit8<>(SB), Y15
	VPXOR   Y0, Y0, Y0
	VPXOR   Y1, Y1, Y1
	VPXOR   Y2, Y2, Y2
	VPXOR   Y3, Y3, Y3
	VPXOR   Y4, Y4, Y4
	VPXOR   Y5, Y5, Y5
	VPXOR   Y6, Y6, Y6
	VPXOR   Y7, Y7, Y7

qblock:
	MOVQ R13, CX

qstep:
	VMOVDQU (AX), Y8
	VMOVDQU 32(AX), Y9
	VPXOR   Y15, Y8, Y8
	VPXOR   Y15, Y9, Y9
	VPABSB  Y8, Y10
	VPABSB  Y9, Y11
	ROWQ((SI), Y0, Y1)
	ROWQ((SI)(BX*1), Y2, Y3)
	ADDQ $4, SI
	ADDQ R14, AX
	DECQ CX
	JNZ  qstep
	FINQ(0, Y0, 0, Y4)
	FINQ(0, Y1, 32, Y5)
	FINQ(8, Y2, 0, Y6)
	FINQ(8, Y3, 32, Y7)
	ADDQ $256, R8
	ADDQ R11, R10
	DECQ R12
	JNZ  qblock
	VMOVUPS Y4, 0(R9)
	VMOVUPS Y5, 32(R9)
	VMOVUPS Y6, 128(R9)
	VMOVUPS Y7, 160(R9)
	VZEROUPPER
	RET
