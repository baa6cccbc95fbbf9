//go:build amd64 && !purego

#include "textflag.h"

// func tinyRowVec(cr, ar, b *float32, n8, k, ldb int)
//
// cr[0:n8] += Σ_p ar[p]·b[p·ldb : p·ldb+n8], 8 columns of C a trip (n8 > 0,
// a multiple of 8; k > 0): each element's sum runs over p in order from 0,
// one FMA a step, and is then added to C, as a packed product's is (C
// rounded once, not once per step: C accumulating many small products
// would lose their low bits).
TEXT ·tinyRowVec(SB), NOSPLIT, $0-48
	MOVQ cr+0(FP), DI
	MOVQ ar+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n8+24(FP), CX
	MOVQ k+32(FP), R8
	MOVQ ldb+40(FP), R9
	SHLQ $2, R9

cols:
	VXORPS  Y0, Y0, Y0
	MOVQ    SI, R11
	MOVQ    DX, R12
	MOVQ    R8, R13

steps:
	VBROADCASTSS (R11), Y1
	VFMADD231PS  (R12), Y1, Y0
	ADDQ         $4, R11
	ADDQ         R9, R12
	DECQ         R13
	JNZ          steps

	VADDPS  (DI), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, DI
	ADDQ    $32, DX
	SUBQ    $8, CX
	JNZ     cols
	VZEROUPPER
	RET
