#include "textflag.h"

// SCALE broadcasts the block scale, the binary16 at off(SI), to Z0.
#define SCALE(off) \
	MOVWLZX      off(SI), AX \
	VMOVD        AX, X0 \
	VCVTPH2PS    X0, X0 \
	VBROADCASTSS X0, Z0

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

// func q8BlocksAVX512(dst *float32, src *byte, blocks int)
//
// Q8_0 blocks {f16 d; int8 qs[32]} to dst[32b+j] = float32(qs[j]) * d.
TEXT ·q8BlocksAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ blocks+16(FP), CX

q8loop:
	SCALE(0)
	VPMOVSXBD    2(SI), Z1
	VPMOVSXBD    18(SI), Z2
	VCVTDQ2PS    Z1, Z1
	VCVTDQ2PS    Z2, Z2
	VMULPS       Z0, Z1, Z1
	VMULPS       Z0, Z2, Z2
	VMOVUPS      Z1, (DI)
	VMOVUPS      Z2, 64(DI)
	ADDQ         $34, SI
	ADDQ         $128, DI
	DECQ         CX
	JNZ          q8loop
	VZEROUPPER
	RET

// QUARTER decodes 16 bytes of a Q4_K chunk at off(SI): low nibbles to
// lo(DI), high ones to hi(DI), each scale * q - offset, rounded after the
// product and after the difference as the Go loop rounds them.
#define QUARTER(off, lo, hi) \
	VPMOVZXBD off(SI), Z0 \
	VPSRLD    $4, Z0, Z1 \
	VPANDD    Z31, Z0, Z0 \
	VCVTDQ2PS Z0, Z0 \
	VCVTDQ2PS Z1, Z1 \
	VMULPS    Z28, Z0, Z0 \
	VSUBPS    Z26, Z0, Z0 \
	VMULPS    Z29, Z1, Z1 \
	VSUBPS    Z27, Z1, Z1 \
	VMOVUPS   Z0, lo(DI) \
	VMOVUPS   Z1, hi(DI)

// func q4kBlockAVX512(out *float32, qs *byte, scale, offset *[8]float32)
//
// The 256 weights of one Q4_K block from its 128 quant bytes: each 32-byte
// chunk c holds sub-block 2c in its low nibbles and 2c+1 in its high ones.
TEXT ·q4kBlockAVX512(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DI
	MOVQ qs+8(FP), SI
	MOVQ scale+16(FP), R8
	MOVQ offset+24(FP), R9
	MOVL $0x0F, AX
	VPBROADCASTD AX, Z31
	MOVQ $4, CX

q4kloop:
	VBROADCASTSS (R8), Z28
	VBROADCASTSS 4(R8), Z29
	VBROADCASTSS (R9), Z26
	VBROADCASTSS 4(R9), Z27
	QUARTER(0, 0, 128)
	QUARTER(16, 64, 192)
	ADDQ $32, SI
	ADDQ $256, DI
	ADDQ $8, R8
	ADDQ $8, R9
	DECQ CX
	JNZ  q4kloop
	VZEROUPPER
	RET

// SIGNS16 writes at off(DI) the 16 weights whose sign bits are the 16-bit
// word at src(SI): +d (Z0) where a bit is set, -d (Z1) where not.
#define SIGNS16(src, off) \
	MOVWLZX   src(SI), AX \
	KMOVW     AX, K1 \
	VPBLENDMD Z0, Z1, K1, Z2 \
	VMOVUPS   Z2, off(DI)

// func q1BlocksAVX512(dst *float32, src *byte, blocks int)
//
// Q1_0_g128 blocks {f16 d; u8 signs[16]} to dst[128b+i] = +d where bit i%8
// of signs[i/8] is set, else d with its sign bit flipped.
TEXT ·q1BlocksAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ blocks+16(FP), CX
	MOVL $0x80000000, AX
	VPBROADCASTD AX, Z30

q1loop:
	SCALE(0)
	VPXORD       Z30, Z0, Z1
	SIGNS16(2, 0)
	SIGNS16(4, 64)
	SIGNS16(6, 128)
	SIGNS16(8, 192)
	SIGNS16(10, 256)
	SIGNS16(12, 320)
	SIGNS16(14, 384)
	SIGNS16(16, 448)
	ADDQ $18, SI
	ADDQ $512, DI
	DECQ CX
	JNZ  q1loop
	VZEROUPPER
	RET

// tq2Shifts puts code l of a broadcast 32-bit word (weight l of 16, two
// bits each) at the bottom of lane l; tq2Table is tq2Value.
DATA tq2Shifts<>+0(SB)/4, $0
DATA tq2Shifts<>+4(SB)/4, $2
DATA tq2Shifts<>+8(SB)/4, $4
DATA tq2Shifts<>+12(SB)/4, $6
DATA tq2Shifts<>+16(SB)/4, $8
DATA tq2Shifts<>+20(SB)/4, $10
DATA tq2Shifts<>+24(SB)/4, $12
DATA tq2Shifts<>+28(SB)/4, $14
DATA tq2Shifts<>+32(SB)/4, $16
DATA tq2Shifts<>+36(SB)/4, $18
DATA tq2Shifts<>+40(SB)/4, $20
DATA tq2Shifts<>+44(SB)/4, $22
DATA tq2Shifts<>+48(SB)/4, $24
DATA tq2Shifts<>+52(SB)/4, $26
DATA tq2Shifts<>+56(SB)/4, $28
DATA tq2Shifts<>+60(SB)/4, $30
GLOBL tq2Shifts<>(SB), RODATA|NOPTR, $64

DATA tq2Table<>+0(SB)/4, $0xBF800000 // -1
DATA tq2Table<>+4(SB)/4, $0
DATA tq2Table<>+8(SB)/4, $0x3F800000 // 1
DATA tq2Table<>+12(SB)/4, $0
GLOBL tq2Table<>(SB), RODATA|NOPTR, $16

// CODES16 writes at off(DI) the 16 weights whose codes are the 32-bit word
// at src(SI): d (Z0) times tq2Value[code].
#define CODES16(src, off) \
	VPBROADCASTD src(SI), Z1 \
	VPSRLVD      Z29, Z1, Z1 \
	VPANDD       Z28, Z1, Z1 \
	VPERMPS      Z27, Z1, Z2 \
	VMULPS       Z0, Z2, Z2 \
	VMOVUPS      Z2, off(DI)

// func tq2BlocksAVX512(dst *float32, src *byte, blocks int)
//
// TQ2_0_g128 blocks {u8 codes[32]; f16 d} to dst[128b+i] = d * tq2Value[code
// i], code i at bits 2*(i%4) of codes[i/4].
TEXT ·tq2BlocksAVX512(SB), NOSPLIT, $0-24
	MOVQ    dst+0(FP), DI
	MOVQ    src+8(FP), SI
	MOVQ    blocks+16(FP), CX
	VMOVDQU32 tq2Shifts<>(SB), Z29
	MOVL    $3, AX
	VPBROADCASTD AX, Z28
	VPXORD  Z27, Z27, Z27
	VMOVUPS tq2Table<>(SB), X27

tq2loop:
	SCALE(32)
	CODES16(0, 0)
	CODES16(4, 64)
	CODES16(8, 128)
	CODES16(12, 192)
	CODES16(16, 256)
	CODES16(20, 320)
	CODES16(24, 384)
	CODES16(28, 448)
	ADDQ $34, SI
	ADDQ $512, DI
	DECQ CX
	JNZ  tq2loop
	VZEROUPPER
	RET

// func q4BlocksAVX512(dst *float32, src *byte, blocks int)
//
// Q4_0 blocks {f16 d; u8 qs[16]} to dst[32b+j] = float32(q-8) * d, q the
// low nibble of qs[j] for j < 16 and the high nibble of qs[j-16] after.
TEXT ·q4BlocksAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ blocks+16(FP), CX
	MOVL $0x0F, AX
	VPBROADCASTD AX, Z31
	MOVL $8, AX
	VPBROADCASTD AX, Z30

q4loop:
	SCALE(0)
	VPMOVZXBD    2(SI), Z1
	VPSRLD       $4, Z1, Z2
	VPANDD       Z31, Z1, Z1
	VPSUBD       Z30, Z1, Z1
	VPSUBD       Z30, Z2, Z2
	VCVTDQ2PS    Z1, Z1
	VCVTDQ2PS    Z2, Z2
	VMULPS       Z0, Z1, Z1
	VMULPS       Z0, Z2, Z2
	VMOVUPS      Z1, (DI)
	VMOVUPS      Z2, 64(DI)
	ADDQ         $18, SI
	ADDQ         $128, DI
	DECQ         CX
	JNZ          q4loop
	VZEROUPPER
	RET

// Q6OUT finishes 16 weights from their low 4 bits (Z4) and top 2 bits
// (Z5): (low | top<<4) - 32, times the scale at sc(R8), stored at out(DI).
#define Q6OUT(sc, out) \
	VPANDD       Z30, Z5, Z5 \
	VPSLLD       $4, Z5, Z5 \
	VPORD        Z5, Z4, Z4 \
	VPSUBD       Z29, Z4, Z4 \
	VCVTDQ2PS    Z4, Z4 \
	VBROADCASTSS sc(R8), Z6 \
	VMULPS       Z6, Z4, Z4 \
	VMOVUPS      Z4, out(DI)

// Q6QUARTER decodes weights 128h + 16k + l (l < 16) and the three runs 32,
// 64 and 96 after them, of a Q6_K block at SI with scales at R8, to DI:
// ql at qlo(SI) and qlo+32(SI), qh at qho(SI), scales s, s+2, s+4, s+6 at
// 4*s(R8), outputs from out(DI). Z31 holds 15, Z30 3, Z29 32.
#define Q6QUARTER(qlo, qho, s, out) \
	VPMOVZXBD qlo(SI), Z1 \
	VPMOVZXBD qlo+32(SI), Z2 \
	VPMOVZXBD qho(SI), Z3 \
	VPANDD    Z31, Z1, Z4 \
	VMOVDQA32 Z3, Z5 \
	Q6OUT(4*s, out) \
	VPANDD    Z31, Z2, Z4 \
	VPSRLD    $2, Z3, Z5 \
	Q6OUT(4*s+8, out+128) \
	VPSRLD    $4, Z1, Z4 \
	VPSRLD    $4, Z3, Z5 \
	Q6OUT(4*s+16, out+256) \
	VPSRLD    $4, Z2, Z4 \
	VPSRLD    $6, Z3, Z5 \
	Q6OUT(4*s+24, out+384)

// func q6kBlockAVX512(out *float32, blk *byte, scales *[16]float32)
//
// One Q6_K block {ql[128]; qh[64]; int8 scales[16]; f16 d} to 256 weights,
// scales[i] = d * scales_i precomputed, each weight scale * (q - 32).
TEXT ·q6kBlockAVX512(SB), NOSPLIT, $0-24
	MOVQ out+0(FP), DI
	MOVQ blk+8(FP), SI
	MOVQ scales+16(FP), R8
	MOVL $15, AX
	VPBROADCASTD AX, Z31
	MOVL $3, AX
	VPBROADCASTD AX, Z30
	MOVL $32, AX
	VPBROADCASTD AX, Z29
	Q6QUARTER(0, 128, 0, 0)
	Q6QUARTER(16, 144, 1, 64)
	Q6QUARTER(64, 160, 8, 512)
	Q6QUARTER(80, 176, 9, 576)
	VZEROUPPER
	RET

// Codes: the formats' integers (codes.go), unsigned bytes in the weights'
// order, with the blocks' scales and offsets as the Go loops make them.

// CODESCALE converts the block's binary16 d at off(SI) to X0.
#define CODESCALE(off) \
	MOVWLZX   off(SI), AX \
	VMOVD     AX, X0 \
	VCVTPH2PS X0, X0

// func q1CodesAVX512(codes *byte, scale, offset *float32, src *byte, blocks int)
//
// Q1_0_g128: code 1 where the sign bit is set, scale 2d, offset d.
TEXT ·q1CodesAVX512(SB), NOSPLIT, $0-40
	MOVQ codes+0(FP), DI
	MOVQ scale+8(FP), R8
	MOVQ offset+16(FP), R9
	MOVQ src+24(FP), SI
	MOVQ blocks+32(FP), CX

q1cloop:
	CODESCALE(0)
	VADDSS    X0, X0, X1
	VMOVSS    X1, (R8)
	VMOVSS    X0, (R9)
	KMOVQ     2(SI), K1
	KMOVQ     10(SI), K2
	VPMOVM2B  K1, Z1
	VPMOVM2B  K2, Z2
	VPABSB    Z1, Z1
	VPABSB    Z2, Z2
	VMOVDQU8  Z1, (DI)
	VMOVDQU8  Z2, 64(DI)
	ADDQ      $18, SI
	ADDQ      $128, DI
	ADDQ      $4, R8
	ADDQ      $4, R9
	DECQ      CX
	JNZ       q1cloop
	VZEROUPPER
	RET

// tq2Select gives byte m of qword k the 8 bits from bit 16(k%4) + 2m of
// its source qword: weights 8k..8k+7 of 64 when qwords 0-3 hold the first
// 32 weights' codes and 4-7 the next 32. tq2Code maps 2-bit codes 0-3 to
// tq2Value+1 (3 is 0, as 1 is).
DATA tq2Select<>+0(SB)/8, $0x0e0c0a0806040200
DATA tq2Select<>+8(SB)/8, $0x1e1c1a1816141210
DATA tq2Select<>+16(SB)/8, $0x2e2c2a2826242220
DATA tq2Select<>+24(SB)/8, $0x3e3c3a3836343230
DATA tq2Select<>+32(SB)/8, $0x0e0c0a0806040200
DATA tq2Select<>+40(SB)/8, $0x1e1c1a1816141210
DATA tq2Select<>+48(SB)/8, $0x2e2c2a2826242220
DATA tq2Select<>+56(SB)/8, $0x3e3c3a3836343230
GLOBL tq2Select<>(SB), RODATA|NOPTR, $64
DATA tq2Spread<>+0(SB)/8, $0
DATA tq2Spread<>+8(SB)/8, $0
DATA tq2Spread<>+16(SB)/8, $0
DATA tq2Spread<>+24(SB)/8, $0
DATA tq2Spread<>+32(SB)/8, $1
DATA tq2Spread<>+40(SB)/8, $1
DATA tq2Spread<>+48(SB)/8, $1
DATA tq2Spread<>+56(SB)/8, $1
GLOBL tq2Spread<>(SB), RODATA|NOPTR, $64
DATA tq2Code<>+0(SB)/8, $0x0000000001020100
DATA tq2Code<>+8(SB)/8, $0
GLOBL tq2Code<>(SB), RODATA|NOPTR, $16

// TQ2CODES writes the 64 codes of the 16 code bytes at off(SI) to doff(DI).
#define TQ2CODES(off, doff) \
	VMOVDQU        off(SI), X1 \
	VPERMQ         Z1, Z28, Z1 \
	VPMULTISHIFTQB Z1, Z29, Z1 \
	VPANDD         Z31, Z1, Z1 \
	VPSHUFB        Z1, Z30, Z1 \
	VMOVDQU8       Z1, doff(DI)

// func tq2CodesAVX512(codes *byte, scale, offset *float32, src *byte, blocks int)
//
// TQ2_0_g128: codes tq2Value+1, scale and offset d. Needs AVX-512 VBMI.
TEXT ·tq2CodesAVX512(SB), NOSPLIT, $0-40
	MOVQ codes+0(FP), DI
	MOVQ scale+8(FP), R8
	MOVQ offset+16(FP), R9
	MOVQ src+24(FP), SI
	MOVQ blocks+32(FP), CX
	VMOVDQU64       tq2Spread<>(SB), Z28
	VMOVDQU64       tq2Select<>(SB), Z29
	VBROADCASTI32X4 tq2Code<>(SB), Z30
	MOVL            $0x03030303, AX
	VPBROADCASTD    AX, Z31

tq2cloop:
	CODESCALE(32)
	VMOVSS X0, (R8)
	VMOVSS X0, (R9)
	TQ2CODES(0, 0)
	TQ2CODES(16, 64)
	ADDQ   $34, SI
	ADDQ   $128, DI
	ADDQ   $4, R8
	ADDQ   $4, R9
	DECQ   CX
	JNZ    tq2cloop
	VZEROUPPER
	RET

DATA blockIndex<>+0(SB)/4, $0
DATA blockIndex<>+4(SB)/4, $1
DATA blockIndex<>+8(SB)/4, $2
DATA blockIndex<>+12(SB)/4, $3
DATA blockIndex<>+16(SB)/4, $4
DATA blockIndex<>+20(SB)/4, $5
DATA blockIndex<>+24(SB)/4, $6
DATA blockIndex<>+28(SB)/4, $7
DATA blockIndex<>+32(SB)/4, $8
DATA blockIndex<>+36(SB)/4, $9
DATA blockIndex<>+40(SB)/4, $10
DATA blockIndex<>+44(SB)/4, $11
DATA blockIndex<>+48(SB)/4, $12
DATA blockIndex<>+52(SB)/4, $13
DATA blockIndex<>+56(SB)/4, $14
DATA blockIndex<>+60(SB)/4, $15
GLOBL blockIndex<>(SB), RODATA|NOPTR, $64

DATA codes128<>+0(SB)/4, $128.0
DATA codes8<>+0(SB)/4, $8.0
GLOBL codes128<>(SB), RODATA|NOPTR, $4
GLOBL codes8<>(SB), RODATA|NOPTR, $4

// SCALES16 converts the binary16 scales of 16 blocks, at SI + Z29's
// offsets, to float32: the scales to (R8), times X30 to the offsets at (R9).
#define SCALES16 \
	KXNORW     K1, K1, K1 \
	VPGATHERDD (SI)(Z29*1), K1, Z1 \
	VPMOVDW    Z1, Y1 \
	VCVTPH2PS  Y1, Z1 \
	VMULPS     Z30, Z1, Z2 \
	VMOVUPS    Z1, (R8) \
	VMOVUPS    Z2, (R9) \
	ADDQ       $64, R8 \
	ADDQ       $64, R9

// func q8CodesAVX512(codes *byte, scale, offset *float32, src *byte, blocks int)
//
// Q8_0: codes q+128, scale d, offset 128d; the scales of 16 blocks at a time.
TEXT ·q8CodesAVX512(SB), NOSPLIT, $0-40
	MOVQ codes+0(FP), DI
	MOVQ scale+8(FP), R8
	MOVQ offset+16(FP), R9
	MOVQ src+24(FP), SI
	MOVQ blocks+32(FP), CX
	MOVL         $0x80808080, AX
	VPBROADCASTD AX, Y31
	VBROADCASTSS codes128<>(SB), Z30
	MOVL         $34, AX
	VPBROADCASTD AX, Z29
	VPMULLD      blockIndex<>(SB), Z29, Z29

q8c16:
	CMPQ CX, $16
	JLT  q8c1
	SCALES16
	MOVQ $16, DX

q8c16codes:
	VMOVDQU 2(SI), Y1
	VPXORD  Y31, Y1, Y1
	VMOVDQU Y1, (DI)
	ADDQ    $34, SI
	ADDQ    $32, DI
	DECQ    DX
	JNZ     q8c16codes
	SUBQ    $16, CX
	JMP     q8c16

q8c1:
	TESTQ CX, CX
	JZ    q8cdone
	CODESCALE(0)
	VMULSS  X30, X0, X1
	VMOVSS  X0, (R8)
	VMOVSS  X1, (R9)
	VMOVDQU 2(SI), Y1
	VPXORD  Y31, Y1, Y1
	VMOVDQU Y1, (DI)
	ADDQ    $34, SI
	ADDQ    $32, DI
	ADDQ    $4, R8
	ADDQ    $4, R9
	DECQ    CX
	JMP     q8c1

q8cdone:
	VZEROUPPER
	RET

// func q4CodesAVX512(codes *byte, scale, offset *float32, src *byte, blocks int)
//
// Q4_0: codes the nibbles (low ones first), scale d, offset 8d; the scales
// of 16 blocks at a time.
TEXT ·q4CodesAVX512(SB), NOSPLIT, $0-40
	MOVQ codes+0(FP), DI
	MOVQ scale+8(FP), R8
	MOVQ offset+16(FP), R9
	MOVQ src+24(FP), SI
	MOVQ blocks+32(FP), CX
	MOVL         $0x0f0f0f0f, AX
	VPBROADCASTD AX, X31
	VBROADCASTSS codes8<>(SB), Z30
	MOVL         $18, AX
	VPBROADCASTD AX, Z29
	VPMULLD      blockIndex<>(SB), Z29, Z29

q4c16:
	CMPQ CX, $16
	JLT  q4c1
	SCALES16
	MOVQ $16, DX

q4c16codes:
	VMOVDQU 2(SI), X1
	VPSRLW  $4, X1, X2
	VPANDD  X31, X1, X1
	VPANDD  X31, X2, X2
	VMOVDQU X1, (DI)
	VMOVDQU X2, 16(DI)
	ADDQ    $18, SI
	ADDQ    $32, DI
	DECQ    DX
	JNZ     q4c16codes
	SUBQ    $16, CX
	JMP     q4c16

q4c1:
	TESTQ CX, CX
	JZ    q4cdone
	CODESCALE(0)
	VMULSS  X30, X0, X1
	VMOVSS  X0, (R8)
	VMOVSS  X1, (R9)
	VMOVDQU 2(SI), X1
	VPSRLW  $4, X1, X2
	VPANDD  X31, X1, X1
	VPANDD  X31, X2, X2
	VMOVDQU X1, (DI)
	VMOVDQU X2, 16(DI)
	ADDQ    $18, SI
	ADDQ    $32, DI
	ADDQ    $4, R8
	ADDQ    $4, R9
	DECQ    CX
	JMP     q4c1

q4cdone:
	VZEROUPPER
	RET

// func nibblesAVX512(codes *byte, qs *byte, runs int)
//
// Q4_K's quants: each 32-byte run of qs to 64 codes, its low nibbles first.
TEXT ·nibblesAVX512(SB), NOSPLIT, $0-24
	MOVQ codes+0(FP), DI
	MOVQ qs+8(FP), SI
	MOVQ runs+16(FP), CX
	MOVL         $0x0f0f0f0f, AX
	VPBROADCASTD AX, Y31

nibloop:
	VMOVDQU  (SI), Y1
	VPSRLW   $4, Y1, Y2
	VPANDD   Y31, Y1, Y1
	VPANDD   Y31, Y2, Y2
	VMOVDQU  Y1, (DI)
	VMOVDQU  Y2, 32(DI)
	ADDQ     $32, SI
	ADDQ     $64, DI
	DECQ     CX
	JNZ      nibloop
	VZEROUPPER
	RET

// Q6HALF writes the 128 codes of the half whose low bits are at ql(SI),
// ql+32(SI) and top bits at qh(SI), to out(DI): each quarter k of 32 is
// the nibbles (low ones for k < 2) with bits 2k..2k+1 of qh shifted to 4-5.
#define Q6HALF(ql, qh, out) \
	VMOVDQU    ql(SI), Y0 \
	VMOVDQU    ql+32(SI), Y1 \
	VMOVDQU    qh(SI), Y2 \
	VPANDD     Y31, Y0, Y3 \
	VPSLLW     $4, Y2, Y4 \
	VPTERNLOGD $0xF8, Y30, Y4, Y3 \
	VMOVDQU    Y3, out(DI) \
	VPANDD     Y31, Y1, Y3 \
	VPSLLW     $2, Y2, Y4 \
	VPTERNLOGD $0xF8, Y30, Y4, Y3 \
	VMOVDQU    Y3, out+32(DI) \
	VPSRLW     $4, Y0, Y3 \
	VPANDD     Y31, Y3, Y3 \
	VPTERNLOGD $0xF8, Y30, Y2, Y3 \
	VMOVDQU    Y3, out+64(DI) \
	VPSRLW     $4, Y1, Y3 \
	VPANDD     Y31, Y3, Y3 \
	VPSRLW     $2, Y2, Y4 \
	VPTERNLOGD $0xF8, Y30, Y4, Y3 \
	VMOVDQU    Y3, out+96(DI)

// func q6kCodesAVX512(codes *byte, blk *byte)
//
// One Q6_K block's 256 unsigned 6-bit quants: weight 128h+32k+l has its low
// 4 bits in ql[64h+32(k&1)+l] (the high nibble for k >= 2) and its top 2
// at bits 2k of qh[32h+l]. (VPTERNLOGD $0xF8 is A | B&C.)
TEXT ·q6kCodesAVX512(SB), NOSPLIT, $0-16
	MOVQ         codes+0(FP), DI
	MOVQ         blk+8(FP), SI
	MOVL         $0x0f0f0f0f, AX
	VPBROADCASTD AX, Y31
	MOVL         $0x30303030, AX
	VPBROADCASTD AX, Y30
	Q6HALF(0, 128, 0)
	Q6HALF(64, 160, 128)
	VZEROUPPER
	RET

// func q5kCodesAVX512(codes *byte, qh, qs *byte)
//
// One Q5_K block's 256 unsigned 5-bit quants: qs as in Q4_K; the fifth
// bit of weight 64c+l is bit 2c of qh[l], of weight 64c+32+l bit 2c+1.
TEXT ·q5kCodesAVX512(SB), NOSPLIT, $0-24
	MOVQ codes+0(FP), DI
	MOVQ qh+8(FP), DX
	MOVQ qs+16(FP), SI
	MOVL         $0x0f0f0f0f, AX
	VPBROADCASTD AX, Y31
	MOVL         $0x10101010, AX
	VPBROADCASTD AX, Y30
	VMOVDQU      (DX), Y2
	VMOVDQU 0(SI), Y0
	VPANDD Y31, Y0, Y3
	VPSRLW $4, Y0, Y1
	VPANDD Y31, Y1, Y1
	VPSLLW $4, Y2, Y4
	VPTERNLOGD $0xF8, Y30, Y4, Y3
	VPSLLW $3, Y2, Y4
	VPTERNLOGD $0xF8, Y30, Y4, Y1
	VMOVDQU Y3, 0(DI)
	VMOVDQU Y1, 32(DI)
	VMOVDQU 32(SI), Y0
	VPANDD Y31, Y0, Y3
	VPSRLW $4, Y0, Y1
	VPANDD Y31, Y1, Y1
	VPSLLW $2, Y2, Y4
	VPTERNLOGD $0xF8, Y30, Y4, Y3
	VPSLLW $1, Y2, Y4
	VPTERNLOGD $0xF8, Y30, Y4, Y1
	VMOVDQU Y3, 64(DI)
	VMOVDQU Y1, 96(DI)
	VMOVDQU 64(SI), Y0
	VPANDD Y31, Y0, Y3
	VPSRLW $4, Y0, Y1
	VPANDD Y31, Y1, Y1
	VMOVDQU Y2, Y4
	VPTERNLOGD $0xF8, Y30, Y4, Y3
	VPSRLW $1, Y2, Y4
	VPTERNLOGD $0xF8, Y30, Y4, Y1
	VMOVDQU Y3, 128(DI)
	VMOVDQU Y1, 160(DI)
	VMOVDQU 96(SI), Y0
	VPANDD Y31, Y0, Y3
	VPSRLW $4, Y0, Y1
	VPANDD Y31, Y1, Y1
	VPSRLW $2, Y2, Y4
	VPTERNLOGD $0xF8, Y30, Y4, Y3
	VPSRLW $3, Y2, Y4
	VPTERNLOGD $0xF8, Y30, Y4, Y1
	VMOVDQU Y3, 192(DI)
	VMOVDQU Y1, 224(DI)
	VZEROUPPER
	RET

// KCODES16 converts the 16 codes at off(SI) to scale (Z28) * q - offset
// (Z26) at 4*off(DI), rounded as the Go loops round them.
#define KCODES16(off) \
	VPMOVZXBD off(SI), Z0 \
	VCVTDQ2PS Z0, Z0 \
	VMULPS    Z28, Z0, Z0 \
	VSUBPS    Z26, Z0, Z0 \
	VMOVUPS   Z0, (4*off)(DI)

// func codesBlockAVX512(out *float32, codes *byte, scale, offset *[8]float32)
//
// The 256 weights of a K-quant block from its codes, 32 a sub-block.
TEXT ·codesBlockAVX512(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DI
	MOVQ codes+8(FP), SI
	MOVQ scale+16(FP), R8
	MOVQ offset+24(FP), R9
	MOVQ $8, CX

codesloop:
	VBROADCASTSS (R8), Z28
	VBROADCASTSS (R9), Z26
	KCODES16(0)
	KCODES16(16)
	ADDQ $32, SI
	ADDQ $128, DI
	ADDQ $4, R8
	ADDQ $4, R9
	DECQ CX
	JNZ  codesloop
	VZEROUPPER
	RET
