//go:build amd64 && !purego

package tensor

// tinyRowVec is tinyRow's columns 0..n8-1 without a transpose in AVX2/FMA
// assembly: cr[j] += Σ_p ar[p]·b[p·ldb+j], n8 > 0 a multiple of 8, k > 0.
//
//go:noescape
func tinyRowVec(cr, ar, b *float32, n8, k, ldb int)
