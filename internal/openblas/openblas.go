//go:build openblas && cgo

// Package openblas calls OpenBLAS's cblas_sgemm, the baseline our Sgemm is
// measured against. It builds only with the openblas tag and cgo, with
// libopenblas-dev installed; the default build never uses it.
package openblas

/*
#cgo LDFLAGS: -lopenblas
void cblas_sgemm(int order, int transA, int transB, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
*/
import "C"

const (
	rowMajor = 101
	noTrans  = 111
	trans    = 112
)

// Sgemm is C = alpha·op(A)·op(B) + beta·C, row-major, as tensor.Sgemm.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	ta, tb := noTrans, noTrans
	if transA {
		ta = trans
	}
	if transB {
		tb = trans
	}
	C.cblas_sgemm(rowMajor, C.int(ta), C.int(tb), C.int(m), C.int(n), C.int(k), C.float(alpha),
		(*C.float)(&a[0]), C.int(lda), (*C.float)(&b[0]), C.int(ldb), C.float(beta), (*C.float)(&c[0]), C.int(ldc))
}
