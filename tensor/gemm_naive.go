package tensor

// SgemmNaive is the oracle: C[m,n] = alpha·op(A)[m,k]·op(B)[k,n] + beta·C,
// row-major, op(X) = Xᵀ when trans is set. A is [m,k] (or [k,m] transposed)
// with row stride lda; B is [k,n] (or [n,k]) with stride ldb; C has stride
// ldc. Accumulates in float64.
func SgemmNaive(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				s += float64(at(a, transA, i, p, lda)) * float64(at(b, transB, p, j, ldb))
			}
			ci := &c[i*ldc+j]
			if beta == 0 {
				*ci = alpha * float32(s)
			} else {
				*ci = alpha*float32(s) + beta**ci
			}
		}
	}
}

// at is op(X)[r, col] of a row-major X with stride ld.
func at(x []float32, trans bool, r, col, ld int) float32 {
	if trans {
		return x[col*ld+r]
	}
	return x[r*ld+col]
}
