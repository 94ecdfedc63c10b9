#include "textflag.h"

// gemmI8x32x6 multiplies 6 rows of x, int8 (row r at x + r*ldx), with 32
// weight rows of unsigned 8-bit codes interleaved four k at a time (w: for
// each step of 4 k, 32 rows of 4 bytes), lanes along the weight rows.
// VPDPBUSD sums each step's four products per lane into int32 accumulators;
// after each block of steps*4 k they are scaled into float32 accumulators:
//
//	acc += xscale*(wscale*sum(code*q)) - woffset*(xscale*sum(q))
//
// with wscale and woffset from wsc (per block: 32 scales, then 32 offsets)
// and xscale, xscale*sum(q) from xsc (per block: a pair per row of x, the
// next block ldxsc bytes on). The sums are exact in int32: a block is at
// most 128 products of 255*127.
//
// Registers: Z0-Z11 int32 sums (row r of x: Z(2r) weight rows 0-15,
// Z(2r+1) rows 16-31), Z12-Z23 float32 sums alike, Z24-Z25 the step's
// codes, Z26-Z29 the block's scales and offsets. AX walks w, SI x's rows
// 0-2 and DI rows 3-5 (BX = ldx), R8 wsc, R10 xsc, CX the steps left in a
// block, R12 the blocks left.

#define FIN(off, I, S, M, F) VCVTDQ2PS I, Z30; VMULPS S, Z30, Z30; VFMADD231PS.BCST off(R10), Z30, F; VFNMADD231PS.BCST off+4(R10), M, F; VPXORD I, I, I

// The prologue, loads and zeroing shared by gemmI8x32x6 and gemmI4x32x6.
#define PROLOGUE \
	MOVQ w+0(FP), AX; \
	MOVQ wsc+8(FP), R8; \
	MOVQ x+16(FP), SI; \
	MOVQ ldx+24(FP), BX; \
	MOVQ xsc+32(FP), R10; \
	MOVQ ldxsc+40(FP), R11; \
	MOVQ blocks+48(FP), R12; \
	MOVQ steps+56(FP), R13; \
	MOVQ out+64(FP), R9; \
	LEAQ (SI)(BX*2), DI; \
	ADDQ BX, DI; \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
	VPXORD Z2, Z2, Z2; \
	VPXORD Z3, Z3, Z3; \
	VPXORD Z4, Z4, Z4; \
	VPXORD Z5, Z5, Z5; \
	VPXORD Z6, Z6, Z6; \
	VPXORD Z7, Z7, Z7; \
	VPXORD Z8, Z8, Z8; \
	VPXORD Z9, Z9, Z9; \
	VPXORD Z10, Z10, Z10; \
	VPXORD Z11, Z11, Z11; \
	VPXORD Z12, Z12, Z12; \
	VPXORD Z13, Z13, Z13; \
	VPXORD Z14, Z14, Z14; \
	VPXORD Z15, Z15, Z15; \
	VPXORD Z16, Z16, Z16; \
	VPXORD Z17, Z17, Z17; \
	VPXORD Z18, Z18, Z18; \
	VPXORD Z19, Z19, Z19; \
	VPXORD Z20, Z20, Z20; \
	VPXORD Z21, Z21, Z21; \
	VPXORD Z22, Z22, Z22; \
	VPXORD Z23, Z23, Z23

// A step's products: the codes of weight rows 0-15 in Z24, 16-31 in Z25.
#define PRODUCTS \
	VPDPBUSD.BCST (SI), Z24, Z0; \
	VPDPBUSD.BCST (SI), Z25, Z1; \
	VPDPBUSD.BCST (SI)(BX*1), Z24, Z2; \
	VPDPBUSD.BCST (SI)(BX*1), Z25, Z3; \
	VPDPBUSD.BCST (SI)(BX*2), Z24, Z4; \
	VPDPBUSD.BCST (SI)(BX*2), Z25, Z5; \
	VPDPBUSD.BCST (DI), Z24, Z6; \
	VPDPBUSD.BCST (DI), Z25, Z7; \
	VPDPBUSD.BCST (DI)(BX*1), Z24, Z8; \
	VPDPBUSD.BCST (DI)(BX*1), Z25, Z9; \
	VPDPBUSD.BCST (DI)(BX*2), Z24, Z10; \
	VPDPBUSD.BCST (DI)(BX*2), Z25, Z11; \
	ADDQ $4, SI; \
	ADDQ $4, DI

// A block's end: its sums scaled into the float32 sums, then the next block.
#define FINISH \
	VMOVUPS (R8), Z26; \
	VMOVUPS 64(R8), Z27; \
	VMOVUPS 128(R8), Z28; \
	VMOVUPS 192(R8), Z29; \
	ADDQ    $256, R8; \
	FIN(0, Z0, Z26, Z28, Z12); \
	FIN(0, Z1, Z27, Z29, Z13); \
	FIN(8, Z2, Z26, Z28, Z14); \
	FIN(8, Z3, Z27, Z29, Z15); \
	FIN(16, Z4, Z26, Z28, Z16); \
	FIN(16, Z5, Z27, Z29, Z17); \
	FIN(24, Z6, Z26, Z28, Z18); \
	FIN(24, Z7, Z27, Z29, Z19); \
	FIN(32, Z8, Z26, Z28, Z20); \
	FIN(32, Z9, Z27, Z29, Z21); \
	FIN(40, Z10, Z26, Z28, Z22); \
	FIN(40, Z11, Z27, Z29, Z23); \
	ADDQ R11, R10

#define EPILOGUE \
	VMOVUPS Z12, 0(R9); \
	VMOVUPS Z13, 64(R9); \
	VMOVUPS Z14, 128(R9); \
	VMOVUPS Z15, 192(R9); \
	VMOVUPS Z16, 256(R9); \
	VMOVUPS Z17, 320(R9); \
	VMOVUPS Z18, 384(R9); \
	VMOVUPS Z19, 448(R9); \
	VMOVUPS Z20, 512(R9); \
	VMOVUPS Z21, 576(R9); \
	VMOVUPS Z22, 640(R9); \
	VMOVUPS Z23, 704(R9); \
	VZEROUPPER

// func gemmI8x32x6(w *byte, wsc *float32, x *int8, ldx int, xsc *float32, ldxsc, blocks, steps int, out *[192]float32)
TEXT ·gemmI8x32x6(SB), NOSPLIT, $0-72
	PROLOGUE

block:
	MOVQ R13, CX

step:
	VMOVDQU32 (AX), Z24
	VMOVDQU32 64(AX), Z25
	ADDQ      $128, AX
	PRODUCTS
	DECQ CX
	JNZ  step
	FINISH
	DECQ R12
	JNZ  block
	EPILOGUE
	RET

DATA nibble<>+0(SB)/4, $0x0f0f0f0f
GLOBL nibble<>(SB), RODATA|NOPTR, $4

// gemmI4x32x6 is gemmI8x32x6 for codes below 16 stored two to a byte: a
// step is 64 bytes, the low nibbles the codes of weight rows 0-15 (as
// gemmI8x32x6's first 64 bytes), the high nibbles those of rows 16-31.
//
// func gemmI4x32x6(w *byte, wsc *float32, x *int8, ldx int, xsc *float32, ldxsc, blocks, steps int, out *[192]float32)
TEXT ·gemmI4x32x6(SB), NOSPLIT, $0-72
	PROLOGUE
	VPBROADCASTD nibble<>(SB), Z31

block4:
	MOVQ R13, CX

step4:
	VMOVDQU32 (AX), Z26
	VPANDD    Z31, Z26, Z24
	VPSRLW    $4, Z26, Z25
	VPANDD    Z31, Z25, Z25
	ADDQ      $64, AX
	PRODUCTS
	DECQ CX
	JNZ  step4
	FINISH
	DECQ R12
	JNZ  block4
	EPILOGUE
	RET

// interleave16 transposes 16 rows of 16 dwords (row r at src + r*ld) into
// 16 columns (column j at dst + j*stride): for 16 weight rows, 16 steps of
// 4 k as gemmI8x32x6 loads them, 16 blocks' scales, or 16 k of float
// weights for gemv64.
//
// func interleave16(dst, src *byte, ld, stride int)
TEXT ·interleave16(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), BX
	MOVQ stride+24(FP), R8
	VMOVDQU32 (SI), Z0
	ADDQ BX, SI
	VMOVDQU32 (SI), Z1
	ADDQ BX, SI
	VMOVDQU32 (SI), Z2
	ADDQ BX, SI
	VMOVDQU32 (SI), Z3
	ADDQ BX, SI
	VMOVDQU32 (SI), Z4
	ADDQ BX, SI
	VMOVDQU32 (SI), Z5
	ADDQ BX, SI
	VMOVDQU32 (SI), Z6
	ADDQ BX, SI
	VMOVDQU32 (SI), Z7
	ADDQ BX, SI
	VMOVDQU32 (SI), Z8
	ADDQ BX, SI
	VMOVDQU32 (SI), Z9
	ADDQ BX, SI
	VMOVDQU32 (SI), Z10
	ADDQ BX, SI
	VMOVDQU32 (SI), Z11
	ADDQ BX, SI
	VMOVDQU32 (SI), Z12
	ADDQ BX, SI
	VMOVDQU32 (SI), Z13
	ADDQ BX, SI
	VMOVDQU32 (SI), Z14
	ADDQ BX, SI
	VMOVDQU32 (SI), Z15
	// Z(2p), Z(2p+1): rows 2p and 2p+1 interleaved by dwords.
	VPUNPCKLDQ Z1, Z0, Z16
	VPUNPCKHDQ Z1, Z0, Z17
	VPUNPCKLDQ Z3, Z2, Z18
	VPUNPCKHDQ Z3, Z2, Z19
	VPUNPCKLDQ Z5, Z4, Z20
	VPUNPCKHDQ Z5, Z4, Z21
	VPUNPCKLDQ Z7, Z6, Z22
	VPUNPCKHDQ Z7, Z6, Z23
	VPUNPCKLDQ Z9, Z8, Z24
	VPUNPCKHDQ Z9, Z8, Z25
	VPUNPCKLDQ Z11, Z10, Z26
	VPUNPCKHDQ Z11, Z10, Z27
	VPUNPCKLDQ Z13, Z12, Z28
	VPUNPCKHDQ Z13, Z12, Z29
	VPUNPCKLDQ Z15, Z14, Z30
	VPUNPCKHDQ Z15, Z14, Z31
	// Z(4g+c), lane l: column 4l+c of rows 4g..4g+3.
	VPUNPCKLQDQ Z18, Z16, Z0
	VPUNPCKHQDQ Z18, Z16, Z1
	VPUNPCKLQDQ Z19, Z17, Z2
	VPUNPCKHQDQ Z19, Z17, Z3
	VPUNPCKLQDQ Z22, Z20, Z4
	VPUNPCKHQDQ Z22, Z20, Z5
	VPUNPCKLQDQ Z23, Z21, Z6
	VPUNPCKHQDQ Z23, Z21, Z7
	VPUNPCKLQDQ Z26, Z24, Z8
	VPUNPCKHQDQ Z26, Z24, Z9
	VPUNPCKLQDQ Z27, Z25, Z10
	VPUNPCKHQDQ Z27, Z25, Z11
	VPUNPCKLQDQ Z30, Z28, Z12
	VPUNPCKHQDQ Z30, Z28, Z13
	VPUNPCKLQDQ Z31, Z29, Z14
	VPUNPCKHQDQ Z31, Z29, Z15
	// Z(j): column j, its four lanes gathered from Z(c), Z(4+c), Z(8+c), Z(12+c).
	VSHUFI32X4 $0x44, Z4, Z0, Z16
	VSHUFI32X4 $0xEE, Z4, Z0, Z17
	VSHUFI32X4 $0x44, Z12, Z8, Z18
	VSHUFI32X4 $0xEE, Z12, Z8, Z19
	VSHUFI32X4 $0x88, Z18, Z16, Z0
	VSHUFI32X4 $0xDD, Z18, Z16, Z4
	VSHUFI32X4 $0x88, Z19, Z17, Z8
	VSHUFI32X4 $0xDD, Z19, Z17, Z12
	VSHUFI32X4 $0x44, Z5, Z1, Z16
	VSHUFI32X4 $0xEE, Z5, Z1, Z17
	VSHUFI32X4 $0x44, Z13, Z9, Z18
	VSHUFI32X4 $0xEE, Z13, Z9, Z19
	VSHUFI32X4 $0x88, Z18, Z16, Z1
	VSHUFI32X4 $0xDD, Z18, Z16, Z5
	VSHUFI32X4 $0x88, Z19, Z17, Z9
	VSHUFI32X4 $0xDD, Z19, Z17, Z13
	VSHUFI32X4 $0x44, Z6, Z2, Z16
	VSHUFI32X4 $0xEE, Z6, Z2, Z17
	VSHUFI32X4 $0x44, Z14, Z10, Z18
	VSHUFI32X4 $0xEE, Z14, Z10, Z19
	VSHUFI32X4 $0x88, Z18, Z16, Z2
	VSHUFI32X4 $0xDD, Z18, Z16, Z6
	VSHUFI32X4 $0x88, Z19, Z17, Z10
	VSHUFI32X4 $0xDD, Z19, Z17, Z14
	VSHUFI32X4 $0x44, Z7, Z3, Z16
	VSHUFI32X4 $0xEE, Z7, Z3, Z17
	VSHUFI32X4 $0x44, Z15, Z11, Z18
	VSHUFI32X4 $0xEE, Z15, Z11, Z19
	VSHUFI32X4 $0x88, Z18, Z16, Z3
	VSHUFI32X4 $0xDD, Z18, Z16, Z7
	VSHUFI32X4 $0x88, Z19, Z17, Z11
	VSHUFI32X4 $0xDD, Z19, Z17, Z15
	VMOVDQU32 Z0, (DI)
	ADDQ R8, DI
	VMOVDQU32 Z1, (DI)
	ADDQ R8, DI
	VMOVDQU32 Z2, (DI)
	ADDQ R8, DI
	VMOVDQU32 Z3, (DI)
	ADDQ R8, DI
	VMOVDQU32 Z4, (DI)
	ADDQ R8, DI
	VMOVDQU32 Z5, (DI)
	ADDQ R8, DI
	VMOVDQU32 Z6, (DI)
	ADDQ R8, DI
	VMOVDQU32 Z7, (DI)
	ADDQ R8, DI
	VMOVDQU32 Z8, (DI)
	ADDQ R8, DI
	VMOVDQU32 Z9, (DI)
	ADDQ R8, DI
	VMOVDQU32 Z10, (DI)
	ADDQ R8, DI
	VMOVDQU32 Z11, (DI)
	ADDQ R8, DI
	VMOVDQU32 Z12, (DI)
	ADDQ R8, DI
	VMOVDQU32 Z13, (DI)
	ADDQ R8, DI
	VMOVDQU32 Z14, (DI)
	ADDQ R8, DI
	VMOVDQU32 Z15, (DI)
	VZEROUPPER
	RET

DATA q8abs<>+0(SB)/4, $0x7fffffff
DATA q8max<>+0(SB)/4, $127.0
GLOBL q8abs<>(SB), RODATA|NOPTR, $4
GLOBL q8max<>(SB), RODATA|NOPTR, $4
DATA q8nan<>+0(SB)/4, $0x7fc00000
GLOBL q8nan<>(SB), RODATA|NOPTR, $4

// quantizeRow rounds a row of x to int8 in blocks of block elements (a
// multiple of 16): each block in steps of max|x|/127, to nearest (even on
// ties), and writes the step and step*sum(q) at sc, the next block's
// scStride bytes on.
//
// func quantizeRow(x *float32, q *int8, sc *float32, scStride, blocks, block int)
TEXT ·quantizeRow(SB), NOSPLIT, $0-48
	MOVQ x+0(FP), SI
	MOVQ q+8(FP), DI
	MOVQ sc+16(FP), R8
	MOVQ scStride+24(FP), R9
	MOVQ blocks+32(FP), R10
	MOVQ block+40(FP), R11
	SHRQ $4, R11
	VPBROADCASTD q8abs<>(SB), Z31
	VMOVSS q8max<>(SB), X30

qblock:
	// The block's largest magnitude.
	MOVQ   SI, AX
	MOVQ   R11, CX
	VXORPS Z1, Z1, Z1
	KXORW  K3, K3, K3

qmax:
	VPANDD (AX), Z31, Z0
	VCMPPS $3, Z0, Z0, K2
	KORW   K2, K3, K3
	VMAXPS Z0, Z1, Z1
	ADDQ   $64, AX
	DECQ   CX
	JNZ    qmax
	VEXTRACTF32X8 $1, Z1, Y2
	VMAXPS        Y2, Y1, Y1
	VEXTRACTF128  $1, Y1, X2
	VMAXPS        X2, X1, X1
	VPERMILPS     $0x4E, X1, X2
	VMAXPS        X2, X1, X1
	VPERMILPS     $0xB1, X1, X2
	VMAXPS        X2, X1, X1

	// step = amax/127, inv = 127/amax (0 for a block of zeros).
	VDIVSS  X30, X1, X3
	KORTESTW K3, K3
	JZ      qnumbers
	VMOVSS  q8nan<>(SB), X3 // a NaN in the block: its products are NaN, as in float32

qnumbers:
	VXORPS  X4, X4, X4
	VUCOMISS X4, X1
	JE      qzero
	VDIVSS  X1, X30, X4

qzero:
	VBROADCASTSS X4, Z4
	MOVQ         R11, CX
	VPXORD       Z5, Z5, Z5

qround:
	VMULPS    (SI), Z4, Z0
	VCVTPS2DQ Z0, Z0
	VPMOVDB   Z0, (DI)
	VPADDD    Z0, Z5, Z5
	ADDQ      $64, SI
	ADDQ      $16, DI
	DECQ      CX
	JNZ       qround
	VEXTRACTI32X8 $1, Z5, Y6
	VPADDD        Y6, Y5, Y5
	VEXTRACTI128  $1, Y5, X6
	VPADDD        X6, X5, X5
	VPSHUFD       $0x4E, X5, X6
	VPADDD        X6, X5, X5
	VPSHUFD       $0xB1, X5, X6
	VPADDD        X6, X5, X5
	VCVTDQ2PS     X5, X5
	VMULSS        X3, X5, X5
	VMOVSS        X3, (R8)
	VMOVSS        X5, 4(R8)
	ADDQ          R9, R8
	DECQ          R10
	JNZ           qblock
	VZEROUPPER
	RET
