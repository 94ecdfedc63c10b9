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

// func q8BlocksAVX512(dst *float32, src *byte, blocks int)
//
// Q8_0 blocks {f16 d; int8 qs[32]} to dst[32b+j] = float32(qs[j]) * d.
TEXT ·q8BlocksAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ blocks+16(FP), CX

q8loop:
	MOVWLZX      (SI), AX
	VMOVD        AX, X0
	VCVTPH2PS    X0, X0
	VBROADCASTSS X0, Z0
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
