//go:build amd64 && !purego

#include "textflag.h"

// func kernel6x16(tiles, k int, a, b, c *float32, ldc int, set bool)
//
// For each of tiles ≥ 1 tiles down C (c 6 rows, a 6·k floats further each):
// C[6,16] += A[6,k]·B[k,16], or C[6,16] = A[6,k]·B[k,16] when set (C is not
// read then, so NaNs in it do not leak). a is packed as six rows of k
// floats, b 16 per step of k; c has a row stride of ldc floats. Y0..Y11
// hold the tile: row r in Y(2r) (columns 0-7) and Y(2r+1) (columns 8-15).
TEXT ·kernel6x16(SB), NOSPLIT, $0-49
	MOVQ tiles+0(FP), R13
	MOVQ a+16(FP), SI
	MOVQ b+24(FP), R14
	MOVQ c+32(FP), DX
	MOVQ ldc+40(FP), R8
	SHLQ $2, R8

	// A's six rows lie k floats apart: rows 0-5 at SI, SI+R9, SI+2·R9,
	// SI+R10, SI+4·R9, SI+R11
	MOVQ k+8(FP), R9
	SHLQ $2, R9
	LEAQ (R9)(R9*2), R10
	LEAQ (R9)(R9*4), R11

tile:
	MOVQ k+8(FP), CX
	MOVQ R14, DI

	// fetch C's tile (6 rows of 64 bytes) while the loop runs: past L2 it
	// would stall the stores at the end
	MOVQ       DX, R12
	PREFETCHT0 (R12)
	ADDQ       R8, R12
	PREFETCHT0 (R12)
	ADDQ       R8, R12
	PREFETCHT0 (R12)
	ADDQ       R8, R12
	PREFETCHT0 (R12)
	ADDQ       R8, R12
	PREFETCHT0 (R12)
	ADDQ       R8, R12
	PREFETCHT0 (R12)

	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

	TESTQ CX, CX
	JZ    store

loop:
	VMOVUPS      (DI), Y12
	VMOVUPS      32(DI), Y13
	VBROADCASTSS (SI), Y14
	VFMADD231PS  Y12, Y14, Y0
	VFMADD231PS  Y13, Y14, Y1
	VBROADCASTSS (SI)(R9*1), Y15
	VFMADD231PS  Y12, Y15, Y2
	VFMADD231PS  Y13, Y15, Y3
	VBROADCASTSS (SI)(R9*2), Y14
	VFMADD231PS  Y12, Y14, Y4
	VFMADD231PS  Y13, Y14, Y5
	VBROADCASTSS (SI)(R10*1), Y15
	VFMADD231PS  Y12, Y15, Y6
	VFMADD231PS  Y13, Y15, Y7
	VBROADCASTSS (SI)(R9*4), Y14
	VFMADD231PS  Y12, Y14, Y8
	VFMADD231PS  Y13, Y14, Y9
	VBROADCASTSS (SI)(R11*1), Y15
	VFMADD231PS  Y12, Y15, Y10
	VFMADD231PS  Y13, Y15, Y11
	ADDQ         $4, SI
	ADDQ         $64, DI
	DECQ         CX
	JNZ          loop

store:
	MOVBLZX set+48(FP), AX
	TESTQ   AX, AX
	JNZ     set16
	VADDPS  (DX), Y0, Y0
	VMOVUPS Y0, (DX)
	VADDPS  32(DX), Y1, Y1
	VMOVUPS Y1, 32(DX)
	ADDQ    R8, DX
	VADDPS  (DX), Y2, Y2
	VMOVUPS Y2, (DX)
	VADDPS  32(DX), Y3, Y3
	VMOVUPS Y3, 32(DX)
	ADDQ    R8, DX
	VADDPS  (DX), Y4, Y4
	VMOVUPS Y4, (DX)
	VADDPS  32(DX), Y5, Y5
	VMOVUPS Y5, 32(DX)
	ADDQ    R8, DX
	VADDPS  (DX), Y6, Y6
	VMOVUPS Y6, (DX)
	VADDPS  32(DX), Y7, Y7
	VMOVUPS Y7, 32(DX)
	ADDQ    R8, DX
	VADDPS  (DX), Y8, Y8
	VMOVUPS Y8, (DX)
	VADDPS  32(DX), Y9, Y9
	VMOVUPS Y9, 32(DX)
	ADDQ    R8, DX
	VADDPS  (DX), Y10, Y10
	VMOVUPS Y10, (DX)
	VADDPS  32(DX), Y11, Y11
	VMOVUPS Y11, 32(DX)
	JMP     next

set16:
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	ADDQ    R8, DX
	VMOVUPS Y2, (DX)
	VMOVUPS Y3, 32(DX)
	ADDQ    R8, DX
	VMOVUPS Y4, (DX)
	VMOVUPS Y5, 32(DX)
	ADDQ    R8, DX
	VMOVUPS Y6, (DX)
	VMOVUPS Y7, 32(DX)
	ADDQ    R8, DX
	VMOVUPS Y8, (DX)
	VMOVUPS Y9, 32(DX)
	ADDQ    R8, DX
	VMOVUPS Y10, (DX)
	VMOVUPS Y11, 32(DX)

next: // the next tile: C six rows down, A's next sliver (SI has moved k floats into this one)
	ADDQ R8, DX
	LEAQ (SI)(R11*1), SI
	DECQ R13
	JNZ  tile
	VZEROUPPER
	RET

// func kernel6x32(tiles, k int, a, b, c *float32, ldc int, set bool)
//
// For each of tiles ≥ 1 tiles down C (as kernel6x16):
// C[6,32] += A[6,k]·B[k,32], or C[6,32] = A[6,k]·B[k,32] when set. a is
// packed as six rows of k floats, b 32 per step of k; c has a row stride of
// ldc floats. Z0..Z11 hold the tile: row r in Z(2r) (columns 0-15) and
// Z(2r+1) (columns 16-31); the loop runs two steps of k a trip, B's rows in
// Z12-Z13 then Z16-Z17, A's in Z14-Z15 then Z18-Z19.
TEXT ·kernel6x32(SB), NOSPLIT, $0-49
	MOVQ tiles+0(FP), R13
	MOVQ a+16(FP), SI
	MOVQ b+24(FP), R14
	MOVQ c+32(FP), DX
	MOVQ ldc+40(FP), R8
	SHLQ $2, R8

	// A's six rows lie k floats apart: rows 0-5 at SI, SI+R9, SI+2·R9,
	// SI+R10, SI+4·R9, SI+R11
	MOVQ k+8(FP), R9
	SHLQ $2, R9
	LEAQ (R9)(R9*2), R10
	LEAQ (R9)(R9*4), R11

tile:
	MOVQ k+8(FP), CX
	MOVQ R14, DI

	// fetch C's tile (6 rows of two 64-byte lines) while the loop runs:
	// past L2 it would stall the stores at the end
	MOVQ       DX, R12
	PREFETCHT0 (R12)
	PREFETCHT0 64(R12)
	ADDQ       R8, R12
	PREFETCHT0 (R12)
	PREFETCHT0 64(R12)
	ADDQ       R8, R12
	PREFETCHT0 (R12)
	PREFETCHT0 64(R12)
	ADDQ       R8, R12
	PREFETCHT0 (R12)
	PREFETCHT0 64(R12)
	ADDQ       R8, R12
	PREFETCHT0 (R12)
	PREFETCHT0 64(R12)
	ADDQ       R8, R12
	PREFETCHT0 (R12)
	PREFETCHT0 64(R12)

	VPXORD Z0, Z0, Z0
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

	// two steps of k per trip (SI by 8 bytes, DI by 256), then one if k is odd
	MOVQ CX, BX
	SHRQ $1, BX
	JZ   tail

loop2:
	VMOVUPS      (DI), Z12
	VMOVUPS      64(DI), Z13
	VBROADCASTSS (SI), Z14
	VFMADD231PS  Z12, Z14, Z0
	VFMADD231PS  Z13, Z14, Z1
	VBROADCASTSS (SI)(R9*1), Z15
	VFMADD231PS  Z12, Z15, Z2
	VFMADD231PS  Z13, Z15, Z3
	VBROADCASTSS (SI)(R9*2), Z14
	VFMADD231PS  Z12, Z14, Z4
	VFMADD231PS  Z13, Z14, Z5
	VBROADCASTSS (SI)(R10*1), Z15
	VFMADD231PS  Z12, Z15, Z6
	VFMADD231PS  Z13, Z15, Z7
	VBROADCASTSS (SI)(R9*4), Z14
	VFMADD231PS  Z12, Z14, Z8
	VFMADD231PS  Z13, Z14, Z9
	VBROADCASTSS (SI)(R11*1), Z15
	VFMADD231PS  Z12, Z15, Z10
	VFMADD231PS  Z13, Z15, Z11
	VMOVUPS      128(DI), Z16
	VMOVUPS      192(DI), Z17
	VBROADCASTSS 4(SI), Z18
	VFMADD231PS  Z16, Z18, Z0
	VFMADD231PS  Z17, Z18, Z1
	VBROADCASTSS 4(SI)(R9*1), Z19
	VFMADD231PS  Z16, Z19, Z2
	VFMADD231PS  Z17, Z19, Z3
	VBROADCASTSS 4(SI)(R9*2), Z18
	VFMADD231PS  Z16, Z18, Z4
	VFMADD231PS  Z17, Z18, Z5
	VBROADCASTSS 4(SI)(R10*1), Z19
	VFMADD231PS  Z16, Z19, Z6
	VFMADD231PS  Z17, Z19, Z7
	VBROADCASTSS 4(SI)(R9*4), Z18
	VFMADD231PS  Z16, Z18, Z8
	VFMADD231PS  Z17, Z18, Z9
	VBROADCASTSS 4(SI)(R11*1), Z19
	VFMADD231PS  Z16, Z19, Z10
	VFMADD231PS  Z17, Z19, Z11
	ADDQ         $8, SI
	ADDQ         $256, DI
	DECQ         BX
	JNZ          loop2

tail:
	TESTQ $1, CX
	JZ    store
	VMOVUPS      (DI), Z12
	VMOVUPS      64(DI), Z13
	VBROADCASTSS (SI), Z14
	VFMADD231PS  Z12, Z14, Z0
	VFMADD231PS  Z13, Z14, Z1
	VBROADCASTSS (SI)(R9*1), Z15
	VFMADD231PS  Z12, Z15, Z2
	VFMADD231PS  Z13, Z15, Z3
	VBROADCASTSS (SI)(R9*2), Z14
	VFMADD231PS  Z12, Z14, Z4
	VFMADD231PS  Z13, Z14, Z5
	VBROADCASTSS (SI)(R10*1), Z15
	VFMADD231PS  Z12, Z15, Z6
	VFMADD231PS  Z13, Z15, Z7
	VBROADCASTSS (SI)(R9*4), Z14
	VFMADD231PS  Z12, Z14, Z8
	VFMADD231PS  Z13, Z14, Z9
	VBROADCASTSS (SI)(R11*1), Z15
	VFMADD231PS  Z12, Z15, Z10
	VFMADD231PS  Z13, Z15, Z11
	ADDQ         $4, SI

store:
	MOVBLZX set+48(FP), AX
	TESTQ   AX, AX
	JNZ     set32
	VADDPS  (DX), Z0, Z0
	VMOVUPS Z0, (DX)
	VADDPS  64(DX), Z1, Z1
	VMOVUPS Z1, 64(DX)
	ADDQ    R8, DX
	VADDPS  (DX), Z2, Z2
	VMOVUPS Z2, (DX)
	VADDPS  64(DX), Z3, Z3
	VMOVUPS Z3, 64(DX)
	ADDQ    R8, DX
	VADDPS  (DX), Z4, Z4
	VMOVUPS Z4, (DX)
	VADDPS  64(DX), Z5, Z5
	VMOVUPS Z5, 64(DX)
	ADDQ    R8, DX
	VADDPS  (DX), Z6, Z6
	VMOVUPS Z6, (DX)
	VADDPS  64(DX), Z7, Z7
	VMOVUPS Z7, 64(DX)
	ADDQ    R8, DX
	VADDPS  (DX), Z8, Z8
	VMOVUPS Z8, (DX)
	VADDPS  64(DX), Z9, Z9
	VMOVUPS Z9, 64(DX)
	ADDQ    R8, DX
	VADDPS  (DX), Z10, Z10
	VMOVUPS Z10, (DX)
	VADDPS  64(DX), Z11, Z11
	VMOVUPS Z11, 64(DX)
	JMP     next

set32:
	VMOVUPS Z0, (DX)
	VMOVUPS Z1, 64(DX)
	ADDQ    R8, DX
	VMOVUPS Z2, (DX)
	VMOVUPS Z3, 64(DX)
	ADDQ    R8, DX
	VMOVUPS Z4, (DX)
	VMOVUPS Z5, 64(DX)
	ADDQ    R8, DX
	VMOVUPS Z6, (DX)
	VMOVUPS Z7, 64(DX)
	ADDQ    R8, DX
	VMOVUPS Z8, (DX)
	VMOVUPS Z9, 64(DX)
	ADDQ    R8, DX
	VMOVUPS Z10, (DX)
	VMOVUPS Z11, 64(DX)

next: // the next tile: C six rows down, A's next sliver (SI has moved k floats into this one)
	ADDQ R8, DX
	LEAQ (SI)(R11*1), SI
	DECQ R13
	JNZ  tile
	VZEROUPPER
	RET

// func copyRows16(k int, src *float32, lds int, dst *float32)
//
// dst[p*16:p*16+16] = src[p*lds:p*lds+16] for p < k (packB's sliver of a
// non-transposed B); k ≥ 1.
TEXT ·copyRows16(SB), NOSPLIT, $0-32
	MOVQ k+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), R8
	MOVQ dst+24(FP), DI
	SHLQ $2, R8

loop:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ    R8, SI
	ADDQ    $64, DI
	DECQ    CX
	JNZ     loop
	VZEROUPPER
	RET

// func copyRows32(k int, src *float32, lds int, dst *float32)
//
// copyRows16 with rows of 32 floats, in AVX-512.
TEXT ·copyRows32(SB), NOSPLIT, $0-32
	MOVQ k+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), R8
	MOVQ dst+24(FP), DI
	SHLQ $2, R8

loop:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	ADDQ    R8, SI
	ADDQ    $128, DI
	DECQ    CX
	JNZ     loop
	VZEROUPPER
	RET
