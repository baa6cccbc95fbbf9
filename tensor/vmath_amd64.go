//go:build amd64 && !purego

package tensor

import "golang.org/x/sys/cpu"

// hasVMath says whether the AVX2/FMA element-wise kernels run (tests turn it
// off to compare against the naive path).
var hasVMath = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// expVec is Exp on n elements, n a positive multiple of 8.
//
//go:noescape
func expVec(dst, x *float32, n int)

// geluVec is GELU on n elements, n a positive multiple of 8.
//
//go:noescape
func geluVec(y, x *float32, n int)

// geluGradVec is GELUGrad on n elements, n a positive multiple of 8.
//
//go:noescape
func geluGradVec(gx, x, gy *float32, n int)

// hasAVX512 says whether AdamStep's vector kernel runs.
var hasAVX512 = cpu.X86.HasAVX512F

// adamVec is AdamStep.Apply on n elements, n a positive multiple of 16.
//
//go:noescape
func adamVec(p, gr, m, v *float32, n int, a *AdamStep, flags int)

// finiteVec is AllFinite on n elements, n a positive multiple of 32.
//
//go:noescape
func finiteVec(x *float32, n int) bool

// reluVec is ReLU on n elements, n a positive multiple of 8.
//
//go:noescape
func reluVec(y, x *float32, n int)

// reluGradVec is ReLUGrad on n elements, n a positive multiple of 8.
//
//go:noescape
func reluGradVec(gx, x, gy *float32, n int)
