//go:build amd64 && !purego

#include "textflag.h"

// func finiteVec(x *float32, n int) bool
//
// Whether x[0:n] holds only finite numbers (n > 0, a multiple of 32): v−v
// is 0 for a finite v and NaN otherwise, and the sums of them, in four
// accumulators of 8 lanes, stay 0 until one meets a NaN.
TEXT ·finiteVec(SB), NOSPLIT, $0-17
	MOVQ   x+0(FP), SI
	MOVQ   n+8(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

loop:
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VSUBPS  Y4, Y4, Y4
	VSUBPS  Y5, Y5, Y5
	VSUBPS  Y6, Y6, Y6
	VSUBPS  Y7, Y7, Y7
	VADDPS  Y4, Y0, Y0
	VADDPS  Y5, Y1, Y1
	VADDPS  Y6, Y2, Y2
	VADDPS  Y7, Y3, Y3
	ADDQ    $128, SI
	SUBQ    $32, CX
	JNZ     loop

	VADDPS    Y1, Y0, Y0
	VADDPS    Y3, Y2, Y2
	VADDPS    Y2, Y0, Y0
	VCMPPS    $3, Y0, Y0, Y1 // unordered: the NaN lanes
	VMOVMSKPS Y1, AX
	TESTL     AX, AX
	SETEQ     ret+16(FP)
	VZEROUPPER
	RET
