#include "textflag.h"

// The kernels multiply rows of x, packed k-major (xt[k*R+r], R = 32 or 16
// rows), with 12 weight rows (w row i at w + i*ldw), k in blocks of 256:
// each block is summed from zero in registers, one lane per output, k in
// order, then added to tile[i*R+r], which starts at zero.
//
// Registers: SI walks the weights along k, R9 = ldw bytes and R10..R14 its
// odd multiples, so that the 12 rows are (SI) plus an index; AX walks xt,
// CX counts the k left, DX the k left in the block, DI is the tile.

#define BCAST(row, A) VBROADCASTSS row, Z28; VFMADD231PS Z30, Z28, A
#define BCAST2(row, A, B) VBROADCASTSS row, Z28; VFMADD231PS Z30, Z28, A; VFMADD231PS Z31, Z28, B

#define SETUP \
	MOVQ xt+0(FP), AX \
	MOVQ w+8(FP), SI \
	MOVQ ldw+16(FP), R9 \
	MOVQ k+24(FP), CX \
	MOVQ tile+32(FP), DI \
	SHLQ $2, R9 \
	LEAQ (R9)(R9*2), R10 \
	LEAQ (R9)(R9*4), R11 \
	LEAQ (R10)(R9*4), R12 \
	LEAQ (R9)(R9*8), R13 \
	LEAQ (R12)(R9*4), R14

// ADD adds accumulator A into the tile at off and zeroes it.
#define ADD(off, A) VADDPS off(DI), A, A; VMOVUPS A, off(DI); VPXORD A, A, A

// func gemm32x12(xt, w *float32, ldw, k int, tile *[384]float32)
TEXT ·gemm32x12(SB), NOSPLIT, $0-40
	SETUP
	VPXORD Z0, Z0, Z0
	VMOVUPS Z0, 0(DI)
	VMOVUPS Z0, 64(DI)
	VMOVUPS Z0, 128(DI)
	VMOVUPS Z0, 192(DI)
	VMOVUPS Z0, 256(DI)
	VMOVUPS Z0, 320(DI)
	VMOVUPS Z0, 384(DI)
	VMOVUPS Z0, 448(DI)
	VMOVUPS Z0, 512(DI)
	VMOVUPS Z0, 576(DI)
	VMOVUPS Z0, 640(DI)
	VMOVUPS Z0, 704(DI)
	VMOVUPS Z0, 768(DI)
	VMOVUPS Z0, 832(DI)
	VMOVUPS Z0, 896(DI)
	VMOVUPS Z0, 960(DI)
	VMOVUPS Z0, 1024(DI)
	VMOVUPS Z0, 1088(DI)
	VMOVUPS Z0, 1152(DI)
	VMOVUPS Z0, 1216(DI)
	VMOVUPS Z0, 1280(DI)
	VMOVUPS Z0, 1344(DI)
	VMOVUPS Z0, 1408(DI)
	VMOVUPS Z0, 1472(DI)
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23

block32:
	MOVQ $256, DX
	CMPQ CX, DX
	CMOVQLT CX, DX
	SUBQ DX, CX

loop32:
	VMOVUPS (AX), Z30
	VMOVUPS 64(AX), Z31
	BCAST2((SI), Z0, Z1)
	BCAST2((SI)(R9*1), Z2, Z3)
	BCAST2((SI)(R9*2), Z4, Z5)
	BCAST2((SI)(R10*1), Z6, Z7)
	BCAST2((SI)(R9*4), Z8, Z9)
	BCAST2((SI)(R11*1), Z10, Z11)
	BCAST2((SI)(R10*2), Z12, Z13)
	BCAST2((SI)(R12*1), Z14, Z15)
	BCAST2((SI)(R9*8), Z16, Z17)
	BCAST2((SI)(R13*1), Z18, Z19)
	BCAST2((SI)(R11*2), Z20, Z21)
	BCAST2((SI)(R14*1), Z22, Z23)
	ADDQ $128, AX
	ADDQ $4, SI
	DECQ DX
	JNZ  loop32

	ADD(0, Z0)
	ADD(64, Z1)
	ADD(128, Z2)
	ADD(192, Z3)
	ADD(256, Z4)
	ADD(320, Z5)
	ADD(384, Z6)
	ADD(448, Z7)
	ADD(512, Z8)
	ADD(576, Z9)
	ADD(640, Z10)
	ADD(704, Z11)
	ADD(768, Z12)
	ADD(832, Z13)
	ADD(896, Z14)
	ADD(960, Z15)
	ADD(1024, Z16)
	ADD(1088, Z17)
	ADD(1152, Z18)
	ADD(1216, Z19)
	ADD(1280, Z20)
	ADD(1344, Z21)
	ADD(1408, Z22)
	ADD(1472, Z23)
	TESTQ CX, CX
	JNZ   block32
	VZEROUPPER
	RET

// func gemm16x12(xt, w *float32, ldw, k int, tile *[192]float32)
TEXT ·gemm16x12(SB), NOSPLIT, $0-40
	SETUP
	VPXORD Z0, Z0, Z0
	VMOVUPS Z0, 0(DI)
	VMOVUPS Z0, 64(DI)
	VMOVUPS Z0, 128(DI)
	VMOVUPS Z0, 192(DI)
	VMOVUPS Z0, 256(DI)
	VMOVUPS Z0, 320(DI)
	VMOVUPS Z0, 384(DI)
	VMOVUPS Z0, 448(DI)
	VMOVUPS Z0, 512(DI)
	VMOVUPS Z0, 576(DI)
	VMOVUPS Z0, 640(DI)
	VMOVUPS Z0, 704(DI)
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11

block16:
	MOVQ $256, DX
	CMPQ CX, DX
	CMOVQLT CX, DX
	SUBQ DX, CX

loop16:
	VMOVUPS (AX), Z30
	BCAST((SI), Z0)
	BCAST((SI)(R9*1), Z1)
	BCAST((SI)(R9*2), Z2)
	BCAST((SI)(R10*1), Z3)
	BCAST((SI)(R9*4), Z4)
	BCAST((SI)(R11*1), Z5)
	BCAST((SI)(R10*2), Z6)
	BCAST((SI)(R12*1), Z7)
	BCAST((SI)(R9*8), Z8)
	BCAST((SI)(R13*1), Z9)
	BCAST((SI)(R11*2), Z10)
	BCAST((SI)(R14*1), Z11)
	ADDQ $64, AX
	ADDQ $4, SI
	DECQ DX
	JNZ  loop16

	ADD(0, Z0)
	ADD(64, Z1)
	ADD(128, Z2)
	ADD(192, Z3)
	ADD(256, Z4)
	ADD(320, Z5)
	ADD(384, Z6)
	ADD(448, Z7)
	ADD(512, Z8)
	ADD(576, Z9)
	ADD(640, Z10)
	ADD(704, Z11)
	TESTQ CX, CX
	JNZ   block16
	VZEROUPPER
	RET

// func gemv64(wt, x *float32, k int, out *[64]float32)
//
// One row of x times 64 weight rows stored k-major (wt[kk*64+i]), lanes
// along the weight rows: each output is summed exactly as gemm32x12 sums
// it (k in order, blocks of 256 from zero, then added up from zero), so a
// row multiplied alone gives what it gives in a batch.
TEXT ·gemv64(SB), NOSPLIT, $0-32
	MOVQ wt+0(FP), SI
	MOVQ x+8(FP), AX
	MOVQ k+16(FP), CX
	MOVQ out+24(FP), DI
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7

gvblock:
	MOVQ    $256, DX
	CMPQ    CX, DX
	CMOVQLT CX, DX
	SUBQ    DX, CX
	VPXORD  Z0, Z0, Z0
	VPXORD  Z1, Z1, Z1
	VPXORD  Z2, Z2, Z2
	VPXORD  Z3, Z3, Z3

gvloop:
	VBROADCASTSS (AX), Z8
	VFMADD231PS  (SI), Z8, Z0
	VFMADD231PS  64(SI), Z8, Z1
	VFMADD231PS  128(SI), Z8, Z2
	VFMADD231PS  192(SI), Z8, Z3
	ADDQ         $4, AX
	ADDQ         $256, SI
	DECQ         DX
	JNZ          gvloop
	VADDPS       Z0, Z4, Z4
	VADDPS       Z1, Z5, Z5
	VADDPS       Z2, Z6, Z6
	VADDPS       Z3, Z7, Z7
	TESTQ        CX, CX
	JNZ          gvblock
	VMOVUPS      Z4, (DI)
	VMOVUPS      Z5, 64(DI)
	VMOVUPS      Z6, 128(DI)
	VMOVUPS      Z7, 192(DI)
	VZEROUPPER
	RET
