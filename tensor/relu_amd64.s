//go:build amd64 && !purego

#include "textflag.h"

// func reluVec(y, x *float32, n int)
//
// y = x where !(x ≤ 0) (NaN passes), +0 elsewhere; n > 0, a multiple of 8.
TEXT ·reluVec(SB), NOSPLIT, $0-24
	MOVQ   y+0(FP), DI
	MOVQ   x+8(FP), SI
	MOVQ   n+16(FP), CX
	VXORPS Y0, Y0, Y0

reluLoop:
	VMOVUPS (SI), Y1
	VCMPPS  $6, Y0, Y1, Y2 // !(x ≤ 0): NLE, true for NaN
	VANDPS  Y2, Y1, Y1
	VMOVUPS Y1, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JNZ     reluLoop
	VZEROUPPER
	RET

// func reluGradVec(gx, x, gy *float32, n int)
//
// gx += gy where x > 0 (ordered: not for NaN), gx unchanged elsewhere; n >
// 0, a multiple of 8.
TEXT ·reluGradVec(SB), NOSPLIT, $0-32
	MOVQ   gx+0(FP), DI
	MOVQ   x+8(FP), SI
	MOVQ   gy+16(FP), DX
	MOVQ   n+24(FP), CX
	VXORPS Y0, Y0, Y0

gradLoop:
	VMOVUPS   (SI), Y1
	VCMPPS    $0x1e, Y0, Y1, Y2 // x > 0: GT_OQ
	VMOVUPS   (DI), Y3
	VADDPS    (DX), Y3, Y4
	VBLENDVPS Y2, Y4, Y3, Y3 // where x > 0, gx + gy
	VMOVUPS   Y3, (DI)
	ADDQ      $32, SI
	ADDQ      $32, DI
	ADDQ      $32, DX
	SUBQ      $8, CX
	JNZ       gradLoop
	VZEROUPPER
	RET
