package tensor

// tinyGemm is the multiply-add count (m·n·k) up to which a product skips
// packing: below it, copying A and B into slivers and walking the blocks
// costs more than the arithmetic (attention's per-head products on small
// models; bench/history.md has the figures).
const tinyGemm = 1024

// sgemmTiny adds alpha·op(A)·op(B) to C [m,n] row by row: an axpy of B's rows
// when B is not transposed, dot products with B's rows when it is. Each
// element of C sums over k in order.
func sgemmTiny(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if transA {
		sgemmTinyTA(transB, m, n, k, alpha, a, lda, b, ldb, c, ldc)
		return
	}
	for i := 0; i < m; i++ {
		tinyRow(transB, n, k, alpha, a[i*lda:i*lda+k], b, ldb, c[i*ldc:i*ldc+n])
	}
}

// sgemmTinyTA is sgemmTiny with A transposed: each row of op(A) is gathered
// first (k ≤ tinyGemm).
func sgemmTinyTA(transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	var buf [tinyGemm]float32
	ar := buf[:k]
	for i := 0; i < m; i++ {
		for p := range ar {
			ar[p] = a[p*lda+i]
		}
		tinyRow(transB, n, k, alpha, ar, b, ldb, c[i*ldc:i*ldc+n])
	}
}

// tinyRow adds alpha·ar·op(B) to the row cr [n], ar being a row of op(A) [k].
func tinyRow(transB bool, n, k int, alpha float32, ar, b []float32, ldb int, cr []float32) {
	if !transB {
		for p, av := range ar {
			av *= alpha
			br := b[p*ldb : p*ldb+n]
			for j := range cr {
				cr[j] += av * br[j]
			}
		}
		return
	}
	for j := range cr {
		br := b[j*ldb : j*ldb+k]
		var s float32
		for p, av := range ar {
			s += av * br[p]
		}
		cr[j] += alpha * s
	}
}
