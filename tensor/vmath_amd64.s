//go:build amd64 && !purego

#include "textflag.h"

// Element-wise e^x and GELU on 8 float32 lanes with AVX2 and FMA; the method
// and its sources are in vmath.go. Every loop takes n > 0, a multiple of 8.

#define SPLAT8(name, bits) \
	DATA name<>+0(SB)/4, bits; DATA name<>+4(SB)/4, bits; DATA name<>+8(SB)/4, bits; DATA name<>+12(SB)/4, bits; \
	DATA name<>+16(SB)/4, bits; DATA name<>+20(SB)/4, bits; DATA name<>+24(SB)/4, bits; DATA name<>+28(SB)/4, bits; \
	GLOBL name<>(SB), RODATA|NOPTR, $32

SPLAT8(exphi, $0x42b20000) // 89.0: clamp: e^89 overflows float32
SPLAT8(explo, $0xc2dc0000) // -110.0: clamp: e^-110 underflows float32
SPLAT8(log2e, $0x3fb8aa3b) // 1.4426950408889634: log2 e
SPLAT8(ln2hi, $0x3f318000) // 0.693359375: ln 2, high part (Cody-Waite)
SPLAT8(ln2lo, $0xb95e8083) // -0.00021219444: ln 2, low part
SPLAT8(p0, $0x39506967) // 0.000198756915: Cephes expf P
SPLAT8(p1, $0x3ab743ce) // 0.0013981999507
SPLAT8(p2, $0x3c088908) // 0.0083334519073
SPLAT8(p3, $0x3d2aa9c1) // 0.041665795894
SPLAT8(p4, $0x3e2aaaaa) // 0.16666665459
SPLAT8(p5, $0x3f000000) // 0.50000001201
SPLAT8(one, $0x3f800000) // 1.0
SPLAT8(half, $0x3f000000) // 0.5
SPLAT8(mhalf, $0xbf000000) // -0.5
SPLAT8(lo20, $0xc1a00000) // -20.0: Phi's input clamp
SPLAT8(hi20, $0x41a00000) // 20.0
SPLAT8(hrsqrt2, $0x3eb504f3) // 0.35355339059327373: 1/(2 sqrt 2): z/2 = |x|/(2 sqrt 2)
SPLAT8(rsqrt2pi, $0x3ecc422a) // 0.3989422804014327: 1/sqrt(2 pi)
SPLAT8(q0, $0xbfa1fc4e) // -1.26551223: Numerical Recipes erfcc Q, t^0
SPLAT8(q1, $0x3f8000c7) // 1.00002368
SPLAT8(q2, $0x3ebf88fb) // 0.37409196
SPLAT8(q3, $0x3dc636c9) // 0.09678418
SPLAT8(q4, $0xbe3ec24c) // -0.18628806
SPLAT8(q5, $0x3e8ec7cc) // 0.27886807
SPLAT8(q6, $0xbf914e5d) // -1.13520398
SPLAT8(q7, $0x3fbe87b0) // 1.48851587
SPLAT8(q8, $0xbf527892) // -0.82215223
SPLAT8(q9, $0x3e2ef945) // 0.17087277: t^9
SPLAT8(bias, $0x0000007f) // float32 exponent bias
SPLAT8(absmask, $0x7fffffff) // clears the sign bit

// EXP sets out = e^in lane by lane (in is kept; n and tmp are clobbered).
// NaN lanes give garbage: callers blend them back. in is clamped to
// [-110, 89], where float32 results are 0 and +Inf, and 2^n is applied as
// 2^(n>>1)·2^(n-(n>>1)) so that both factors stay normal numbers.
#define EXP(in, out, n, tmp) \
	VMINPS       exphi<>(SB), in, out; \
	VMAXPS       explo<>(SB), out, out; \
	VMULPS       log2e<>(SB), out, n; \
	VROUNDPS     $0, n, n; \
	VFNMADD231PS ln2hi<>(SB), n, out; \
	VFNMADD231PS ln2lo<>(SB), n, out; \
	VMOVUPS      p0<>(SB), tmp; \
	VFMADD213PS  p1<>(SB), out, tmp; \
	VFMADD213PS  p2<>(SB), out, tmp; \
	VFMADD213PS  p3<>(SB), out, tmp; \
	VFMADD213PS  p4<>(SB), out, tmp; \
	VFMADD213PS  p5<>(SB), out, tmp; \
	VFMADD213PS  one<>(SB), out, tmp; \
	VFMADD213PS  one<>(SB), out, tmp; \
	VCVTPS2DQ    n, n; \
	VPSRAD       $1, n, out; \
	VPSUBD       out, n, n; \
	VPADDD       bias<>(SB), out, out; \
	VPSLLD       $23, out, out; \
	VMULPS       out, tmp, tmp; \
	VPADDD       bias<>(SB), n, n; \
	VPSLLD       $23, n, n; \
	VMULPS       n, tmp, out

// PHI sets Y1 = Φ(x) for x in Y0 (clamped to [-20, 20], where Φ is 0 and 1
// in float32) and Y6 = e^(-x²/2) of the clamped x; Y2-Y5 and Y7-Y10 are
// clobbered. With hi + lo = x² exactly (x·x and its FMA remainder),
// e^(-x²/2) = e^(-hi/2)·(1 - lo/2), and erfc(z) = t·e^(-x²/2)·e^Q(t) with
// z = |x|/√2, t = 1/(1 + z/2).
#define PHI \
	VMAXPS      lo20<>(SB), Y0, Y1; \
	VMINPS      hi20<>(SB), Y1, Y1; \
	VMULPS      Y1, Y1, Y2; \
	VMOVAPS     Y2, Y3; \
	VFMSUB231PS Y1, Y1, Y3; \
	VANDPS      absmask<>(SB), Y1, Y4; \
	VMULPS      hrsqrt2<>(SB), Y4, Y4; \
	VADDPS      one<>(SB), Y4, Y4; \
	VMOVUPS     one<>(SB), Y5; \
	VDIVPS      Y4, Y5, Y4; \
	VMOVUPS     q9<>(SB), Y5; \
	VFMADD213PS q8<>(SB), Y4, Y5; \
	VFMADD213PS q7<>(SB), Y4, Y5; \
	VFMADD213PS q6<>(SB), Y4, Y5; \
	VFMADD213PS q5<>(SB), Y4, Y5; \
	VFMADD213PS q4<>(SB), Y4, Y5; \
	VFMADD213PS q3<>(SB), Y4, Y5; \
	VFMADD213PS q2<>(SB), Y4, Y5; \
	VFMADD213PS q1<>(SB), Y4, Y5; \
	VFMADD213PS q0<>(SB), Y4, Y5; \
	VMULPS      half<>(SB), Y3, Y3; \
	VMULPS      mhalf<>(SB), Y2, Y2; \
	EXP(Y2, Y6, Y7, Y8); \
	VMOVUPS     one<>(SB), Y9; \
	VSUBPS      Y3, Y9, Y9; \
	VMULPS      Y9, Y6, Y6; \
	EXP(Y5, Y7, Y8, Y9); \
	VMULPS      Y7, Y4, Y7; \
	VMULPS      Y6, Y7, Y7; \
	VMULPS      half<>(SB), Y7, Y7; \
	VMOVUPS     one<>(SB), Y8; \
	VSUBPS      Y7, Y8, Y8; \
	VXORPS      Y10, Y10, Y10; \
	VCMPPS      $0x1e, Y10, Y1, Y10; \
	VBLENDVPS   Y10, Y8, Y7, Y1

// func expVec(dst, x *float32, n int)
TEXT ·expVec(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX

expLoop:
	VMOVUPS   (SI), Y0
	EXP(Y0, Y1, Y2, Y3)
	VCMPPS    $3, Y0, Y0, Y2 // unordered: NaN lanes keep x
	VBLENDVPS Y2, Y0, Y1, Y1
	VMOVUPS   Y1, (DI)
	ADDQ      $32, SI
	ADDQ      $32, DI
	SUBQ      $8, CX
	JNZ       expLoop
	VZEROUPPER
	RET

// func geluVec(y, x *float32, n int)
TEXT ·geluVec(SB), NOSPLIT, $0-24
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX

geluLoop:
	VMOVUPS (SI), Y0
	PHI
	VMULPS  Y1, Y0, Y1 // x·Φ(x): ±Inf and NaN lanes as x·Φ in float64
	VMOVUPS Y1, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JNZ     geluLoop
	VZEROUPPER
	RET

// func geluGradVec(gx, x, gy *float32, n int)
TEXT ·geluGradVec(SB), NOSPLIT, $0-32
	MOVQ gx+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ gy+16(FP), DX
	MOVQ n+24(FP), CX

gradLoop:
	VMOVUPS     (SI), Y0
	PHI
	VMULPS      rsqrt2pi<>(SB), Y6, Y6 // φ(x)
	VFMADD231PS Y6, Y0, Y1             // Φ(x) + x·φ(x), x unclamped
	VMOVUPS     (DI), Y2
	VFMADD231PS (DX), Y1, Y2           // gx += gy·GELU'(x)
	VMOVUPS     Y2, (DI)
	ADDQ        $32, SI
	ADDQ        $32, DI
	ADDQ        $32, DX
	SUBQ        $8, CX
	JNZ         gradLoop
	VZEROUPPER
	RET

// func adamVec(p, gr, m, v *float32, n int, a *AdamStep, flags int)
//
// AdamStep.Apply on n elements (n > 0, a multiple of 16), 16 lanes a trip,
// each operation rounded on its own as ApplyGo's loop rounds it (no FMA;
// VSQRTPS is correctly rounded, as float32(math.Sqrt(float64(x))) is).
// a's fields at their offsets: Scale 0, Coupled 4, Shrink 8, Beta1 12,
// Beta2 16, Eps 20, Step 24, SqrtBC2 28 (TestAdamStepLayout). flags: 1
// scale, 2 clear g, 4 coupled decay, 8 shrink. Z0 gi, Z1 p, Z3 m, Z5 v.
TEXT ·adamVec(SB), NOSPLIT, $0-56
	MOVQ p+0(FP), DI
	MOVQ gr+8(FP), SI
	MOVQ m+16(FP), R10
	MOVQ v+24(FP), R11
	MOVQ n+32(FP), CX
	MOVQ a+40(FP), AX
	MOVQ flags+48(FP), R8

	VBROADCASTSS 0(AX), Z16  // Scale
	VBROADCASTSS 4(AX), Z17  // Coupled
	VBROADCASTSS 8(AX), Z18  // Shrink
	VBROADCASTSS 12(AX), Z19 // Beta1
	VBROADCASTSS 16(AX), Z20 // Beta2
	VBROADCASTSS 20(AX), Z21 // Eps
	VBROADCASTSS 24(AX), Z22 // Step
	VBROADCASTSS 28(AX), Z23 // SqrtBC2
	MOVL         $0x3f800000, BX
	VPBROADCASTD BX, Z24     // 1
	VSUBPS       Z19, Z24, Z25 // 1 − Beta1
	VSUBPS       Z20, Z24, Z26 // 1 − Beta2
	VPXORD       Z27, Z27, Z27 // 0

adamloop:
	VMOVUPS (SI), Z0
	TESTQ   $1, R8
	JZ      noscale
	VMULPS  Z16, Z0, Z0 // gi·Scale

noscale:
	TESTQ   $2, R8
	JZ      noclear
	VMOVUPS Z27, (SI)   // g = 0

noclear:
	VMOVUPS (DI), Z1
	TESTQ   $4, R8
	JZ      nocoupled
	VMULPS  Z1, Z17, Z2 // Coupled·p
	VADDPS  Z2, Z0, Z0  // gi + Coupled·p

nocoupled:
	TESTQ  $8, R8
	JZ     noshrink
	VMULPS Z18, Z1, Z1 // p·Shrink

noshrink:
	VMOVUPS (R10), Z3
	VMULPS  Z3, Z19, Z3 // Beta1·m
	VMULPS  Z0, Z25, Z4 // (1 − Beta1)·gi
	VADDPS  Z4, Z3, Z3
	VMOVUPS Z3, (R10)
	VMOVUPS (R11), Z5
	VMULPS  Z5, Z20, Z5 // Beta2·v
	VMULPS  Z0, Z26, Z6 // (1 − Beta2)·gi
	VMULPS  Z0, Z6, Z6  // ·gi
	VADDPS  Z6, Z5, Z5
	VMOVUPS Z5, (R11)
	VSQRTPS Z5, Z7
	VDIVPS  Z23, Z7, Z7 // √v / SqrtBC2
	VADDPS  Z21, Z7, Z7 // + Eps
	VMULPS  Z3, Z22, Z8 // Step·m
	VDIVPS  Z7, Z8, Z8  // / denom
	VSUBPS  Z8, Z1, Z1  // p − …
	VMOVUPS Z1, (DI)
	ADDQ    $64, DI
	ADDQ    $64, SI
	ADDQ    $64, R10
	ADDQ    $64, R11
	SUBQ    $16, CX
	JNZ     adamloop
	VZEROUPPER
	RET
