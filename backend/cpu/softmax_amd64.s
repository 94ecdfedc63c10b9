#include "textflag.h"

// Softmax's three passes and SwiGLU on AVX-512, 16 lanes at a time, the
// last partial vector under a mask, so every element is treated alike
// wherever it falls.

// TAILMASK sets K1 to the lanes of the next vector: all 16, or the CX
// left when fewer (BZHI clears the bits of -1 from min(CX, 16) up).
#define TAILMASK \
	MOVQ    $16, BX \
	CMPQ    CX, BX \
	CMOVQLT CX, BX \
	MOVQ    $-1, AX \
	BZHIQ   BX, AX, AX \
	KMOVW   AX, K1

// EXPCONSTS loads Cephes expf's constants, by register: Z30 log2(e); Z29, Z28 ln 2 in a high part
// (0.693359375) and a low one (-2.12194440e-4); Z27-Z22 Cephes' P
// (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
// 1.6666665459e-1, 5.0000001201e-1); Z21 1; Z20 -87.33654, where float32
// stops being normal.
#define EXPCONSTS \
	MOVL $0x3FB8AA3B, AX \
	VPBROADCASTD AX, Z30 \
	MOVL $0x3F318000, AX \
	VPBROADCASTD AX, Z29 \
	MOVL $0xB95E8083, AX \
	VPBROADCASTD AX, Z28 \
	MOVL $0x39506967, AX \
	VPBROADCASTD AX, Z27 \
	MOVL $0x3AB743CE, AX \
	VPBROADCASTD AX, Z26 \
	MOVL $0x3C088908, AX \
	VPBROADCASTD AX, Z25 \
	MOVL $0x3D2AA9C1, AX \
	VPBROADCASTD AX, Z24 \
	MOVL $0x3E2AAAAA, AX \
	VPBROADCASTD AX, Z23 \
	MOVL $0x3F000000, AX \
	VPBROADCASTD AX, Z22 \
	MOVL $0x3F800000, AX \
	VPBROADCASTD AX, Z21 \
	MOVL $0xC2AEAC4F, AX \
	VPBROADCASTD AX, Z20

// EXP sets Z2 = exp(Z0), Z0 clamped below at -87.3, +Inf past 88.7
// (Z1, Z3 scratch): n = round(x log2 e), r = x - n ln 2 in two parts,
// exp(r) = 1 + r + r^2 P(r), times 2^n.
#define EXP \
	VMAXPS      Z20, Z0, Z0 \
	VMULPS      Z30, Z0, Z1 \
	VRNDSCALEPS $0, Z1, Z1 \
	VFNMADD231PS Z29, Z1, Z0 \
	VFNMADD231PS Z28, Z1, Z0 \
	VMOVAPS     Z27, Z2 \
	VFMADD213PS Z26, Z0, Z2 \
	VFMADD213PS Z25, Z0, Z2 \
	VFMADD213PS Z24, Z0, Z2 \
	VFMADD213PS Z23, Z0, Z2 \
	VFMADD213PS Z22, Z0, Z2 \
	VMULPS      Z0, Z0, Z3 \
	VFMADD213PS Z0, Z3, Z2 \
	VADDPS      Z21, Z2, Z2 \
	VSCALEFPS   Z1, Z2, Z2

// func maxf32(x *float32, n int, out *[16]float32)
//
// VMAXPS returns its second source where either is NaN, so a lane's NaN
// lasted only until the next vector: K3 collects the lanes that saw one,
// which end NaN, as the scalar max and the GPU's softmax have it.
TEXT ·maxf32(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ out+16(FP), DI
	MOVL $0xFF800000, AX // -Inf
	VPBROADCASTD AX, Z1
	VMOVAPS Z1, Z2
	KXORW   K3, K3, K3

maxloop:
	TAILMASK
	VMOVAPS Z2, Z0
	VMOVUPS (SI), K1, Z0
	VMAXPS  Z0, Z1, Z1
	VCMPPS  $3, Z0, Z0, K1, K2 // unordered: NaN
	KORW    K2, K3, K3
	ADDQ    $64, SI
	SUBQ    $16, CX
	JG      maxloop
	MOVL    $0x7FC00000, AX // NaN
	VPBROADCASTD AX, Z3
	VMOVAPS Z3, K3, Z1
	VMOVUPS Z1, (DI)
	VZEROUPPER
	RET

// func expShifted(o, x *float32, n int, m float32, sums *[16]float64)
//
// o[i] = exp(x[i] - m), 0 where x[i] - m < -87.3 (below float32's normal
// range, and -Inf). sums gets the o[i] in float64, lane i%16 of 16, each
// lane in order.
TEXT ·expShifted(SB), NOSPLIT, $0-40
	MOVQ o+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS m+24(FP), Z31
	MOVQ sums+32(FP), DX
	EXPCONSTS
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19

exploop:
	TAILMASK
	VMOVUPS.Z   (SI), K1, Z0
	VSUBPS      Z31, Z0, Z0
	VCMPPS      $13, Z20, Z0, K1, K2 // x >= -87.3 (false for NaN too)
	EXP
	VMOVAPS.Z   Z2, K2, Z2
	VMOVUPS     Z2, K1, (DI)
	VCVTPS2PD   Y2, Z4
	VADDPD      Z4, Z18, Z18
	VEXTRACTF64X4 $1, Z2, Y5
	VCVTPS2PD   Y5, Z5
	VADDPD      Z5, Z19, Z19
	ADDQ        $64, SI
	ADDQ        $64, DI
	SUBQ        $16, CX
	JG          exploop
	VMOVUPD     Z18, (DX)
	VMOVUPD     Z19, 64(DX)
	VZEROUPPER
	RET

// func scalef32(o *float32, n int, s float32)
TEXT ·scalef32(SB), NOSPLIT, $0-20
	MOVQ o+0(FP), DI
	MOVQ n+8(FP), CX
	VBROADCASTSS s+16(FP), Z1

scaleloop:
	TAILMASK
	VMOVUPS.Z (DI), K1, Z0
	VMULPS    Z1, Z0, Z0
	VMOVUPS   Z0, K1, (DI)
	ADDQ      $64, DI
	SUBQ      $16, CX
	JG        scaleloop
	VZEROUPPER
	RET

// func normApply(o, x, gain *float32, n int, s float32)
//
// o[i] = x[i]*s*gain[i], multiplied in that order.
TEXT ·normApply(SB), NOSPLIT, $0-36
	MOVQ o+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ gain+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS s+32(FP), Z1

normloop:
	TAILMASK
	VMOVUPS.Z (SI), K1, Z0
	VMOVUPS.Z (DX), K1, Z2
	VMULPS    Z1, Z0, Z0
	VMULPS    Z2, Z0, Z0
	VMOVUPS   Z0, K1, (DI)
	ADDQ      $64, DI
	ADDQ      $64, SI
	ADDQ      $64, DX
	SUBQ      $16, CX
	JG        normloop
	VZEROUPPER
	RET

// func swiglu(d, gate, up *float32, n int)
//
// d[i] = gate[i] / (1 + exp(-gate[i])) * up[i]. Past 88.7, exp(-gate) is
// +Inf and the output -0, within 1e-36 of its value.
TEXT ·swiglu(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DX
	MOVQ n+24(FP), CX
	EXPCONSTS
	MOVL $0x80000000, AX
	VPBROADCASTD AX, Z18 // the sign bit

gluloop:
	TAILMASK
	VMOVUPS.Z (SI), K1, Z4
	VPXORD    Z18, Z4, Z0 // -g
	EXP
	VADDPS    Z21, Z2, Z2
	VDIVPS    Z2, Z4, Z4
	VMOVUPS.Z (DX), K1, Z5
	VMULPS    Z5, Z4, Z4
	VMOVUPS   Z4, K1, (DI)
	ADDQ      $64, SI
	ADDQ      $64, DX
	ADDQ      $64, DI
	SUBQ      $16, CX
	JG        gluloop
	VZEROUPPER
	RET
