//go:build !amd64 || purego

package tensor

// hasVMath is false: every element takes the naive path.
var hasVMath = false

func expVec(dst, x *float32, n int)         { panic("tensor: no vector math on this platform") }
func geluVec(y, x *float32, n int)          { panic("tensor: no vector math on this platform") }
func geluGradVec(gx, x, gy *float32, n int) { panic("tensor: no vector math on this platform") }

const hasAVX512 = false

func adamVec(p, gr, m, v *float32, n int, a *AdamStep, flags int) {
	panic("tensor: no AVX-512 on this platform")
}

func tinyRowVec(cr, ar, b *float32, n8, k, ldb int) { panic("tensor: no vector math on this platform") }

func finiteVec(x *float32, n int) bool { panic("tensor: no vector math on this platform") }

func reluVec(y, x *float32, n int)          { panic("tensor: no vector math on this platform") }
func reluGradVec(gx, x, gy *float32, n int) { panic("tensor: no vector math on this platform") }
