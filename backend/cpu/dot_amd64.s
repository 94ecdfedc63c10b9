#include "textflag.h"

// HSUM sums the 8 lanes of Y into the float32 at off(R9).
#define HSUM(Y, X, off) \
	VEXTRACTF128 $1, Y, X8 \
	VADDPS X8, X, X8 \
	VHADDPS X8, X8, X8 \
	VHADDPS X8, X8, X8 \
	VMOVSS X8, off(R9)

// func dot4x2(w0, w1, w2, w3, x0, x1 *float32, n int, out *[8]float32)
TEXT ·dot4x2(SB), NOSPLIT, $0-64
	MOVQ w0+0(FP), AX
	MOVQ w1+8(FP), BX
	MOVQ w2+16(FP), CX
	MOVQ w3+24(FP), DX
	MOVQ x0+32(FP), SI
	MOVQ x1+40(FP), DI
	MOVQ n+48(FP), R8
	MOVQ out+56(FP), R9
	SHLQ $2, R8 // bytes
	XORQ R10, R10
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

loop:
	CMPQ R10, R8
	JGE  done
	VMOVUPS (SI)(R10*1), Y8
	VMOVUPS (DI)(R10*1), Y9
	VMOVUPS (AX)(R10*1), Y10
	VFMADD231PS Y8, Y10, Y0
	VFMADD231PS Y9, Y10, Y1
	VMOVUPS (BX)(R10*1), Y11
	VFMADD231PS Y8, Y11, Y2
	VFMADD231PS Y9, Y11, Y3
	VMOVUPS (CX)(R10*1), Y12
	VFMADD231PS Y8, Y12, Y4
	VFMADD231PS Y9, Y12, Y5
	VMOVUPS (DX)(R10*1), Y13
	VFMADD231PS Y8, Y13, Y6
	VFMADD231PS Y9, Y13, Y7
	ADDQ $32, R10
	JMP  loop

done:
	HSUM(Y0, X0, 0)
	HSUM(Y1, X1, 4)
	HSUM(Y2, X2, 8)
	HSUM(Y3, X3, 12)
	HSUM(Y4, X4, 16)
	HSUM(Y5, X5, 20)
	HSUM(Y6, X6, 24)
	HSUM(Y7, X7, 28)
	VZEROUPPER
	RET

// func dot4x1(w0, w1, w2, w3, x0 *float32, n int, out *[8]float32)
// dot4x2 for one input row: each sum is made by the same instructions in
// the same order, so a row's result does not depend on its partner.
TEXT ·dot4x1(SB), NOSPLIT, $0-56
	MOVQ w0+0(FP), AX
	MOVQ w1+8(FP), BX
	MOVQ w2+16(FP), CX
	MOVQ w3+24(FP), DX
	MOVQ x0+32(FP), SI
	MOVQ n+40(FP), R8
	MOVQ out+48(FP), R9
	SHLQ $2, R8
	XORQ R10, R10
	VXORPS Y0, Y0, Y0
	VXORPS Y2, Y2, Y2
	VXORPS Y4, Y4, Y4
	VXORPS Y6, Y6, Y6

loop1:
	CMPQ R10, R8
	JGE  done1
	VMOVUPS (SI)(R10*1), Y8
	VMOVUPS (AX)(R10*1), Y10
	VFMADD231PS Y8, Y10, Y0
	VMOVUPS (BX)(R10*1), Y11
	VFMADD231PS Y8, Y11, Y2
	VMOVUPS (CX)(R10*1), Y12
	VFMADD231PS Y8, Y12, Y4
	VMOVUPS (DX)(R10*1), Y13
	VFMADD231PS Y8, Y13, Y6
	ADDQ $32, R10
	JMP  loop1

done1:
	HSUM(Y0, X0, 0)
	HSUM(Y2, X2, 8)
	HSUM(Y4, X4, 16)
	HSUM(Y6, X6, 24)
	VZEROUPPER
	RET
