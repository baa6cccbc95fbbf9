package tensor

// tinyGemm is the multiply-add count (m·n·k) up to which a product skips
// packing: below it, copying A and B into slivers and walking the blocks
// costs more than the arithmetic (attention's per-head products on small
// models; bench/history.md has the figures). With AVX2 and at least 8
// columns (sgemmTinyVec) the bound is tinyGemmVec: up to it the unpacked
// vector rows beat the packed Go kernels 2-10x and the system BLAS, whose
// call costs about a microsecond, too (BenchmarkTinyVsLibrary).
const (
	tinyGemm    = 1024
	tinyGemmVec = 8192
)

// isTiny says whether Sgemm and SgemmGo hand a product to sgemmTiny.
func isTiny(m, n, k int) bool {
	mnk := m * n * k
	return mnk <= tinyGemm || hasVMath && n >= 8 && mnk <= tinyGemmVec
}

// sgemmTiny adds alpha·op(A)·op(B) to C [m,n] row by row: an axpy of B's rows
// when B is not transposed, dot products with B's rows when it is; with
// AVX2 and at least 8 columns, sgemmTinyVec. Each element of C sums over k
// in order (k > 0).
func sgemmTiny(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if hasVMath && n >= 8 {
		sgemmTinyVec(transA, transB, m, n, k, alpha, a, lda, b, ldb, c, ldc)
		return
	}
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

// sgemmTinyVec is sgemmTiny with AVX2: op(B) as [k,n] rows (copied out of
// B first when transposed), each row of alpha·op(A) gathered where it is
// not a row of A as it stands, and C's row updated by tinyRowVec 8 columns
// at a time, the last n mod 8 in Go, each element c + (Σ_p a_p·b_p, in
// order): the sum first, as a packed product (and PyTorch, accumulating a
// micro-batch's gradient) adds it to C. Adding each step to C instead
// moved candle-uno's replay (SGD, micro-batch 4) from 1.8e-7 to 5.2e-4 of
// PyTorch's parameters. The scratch is on the stack where it is small (Go clears it each
// call) and from the packing buffers' pool otherwise.
func sgemmTinyVec(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if transB {
		if m == 1 { // the copy would cost what the product does
			tinyRow(true, n, k, alpha, rowOf(transA, a, lda, 0, k), b, ldb, c[:n])
			return
		}
		var small [512]float32
		bt := small[:]
		if k*n > len(small) {
			bt = getBuf(k * n)
			defer putBuf(bt)
		}
		bt = bt[: k*n : k*n] // bt[p,j] = B[j,p]
		for j := 0; j < n; j++ {
			for p, v := range b[j*ldb : j*ldb+k] {
				bt[p*n+j] = v
			}
		}
		b, ldb = bt, n
	}
	_ = b[(k-1)*ldb+n-1] // every row of op(B) the kernel reads
	n8 := n &^ 7
	var small [128]float32
	abuf := small[:]
	if k > len(small) {
		abuf = getBuf(k)
		defer putBuf(abuf)
	}
	for i := 0; i < m; i++ {
		ar := abuf[:k:k]
		if !transA && alpha == 1 {
			ar = a[i*lda : i*lda+k : i*lda+k]
		} else {
			for p := range ar {
				ar[p] = alpha * at(a, transA, i, p, lda)
			}
		}
		cr := c[i*ldc : i*ldc+n : i*ldc+n]
		tinyRowVec(&cr[0], &ar[0], &b[0], n8, k, ldb)
		for j := n8; j < n; j++ {
			var s float32
			for p, av := range ar {
				s += av * b[p*ldb+j]
			}
			cr[j] += s
		}
	}
}

// rowOf is row i of op(A) [.,k]: A's row as it stands, or gathered.
func rowOf(trans bool, a []float32, lda, i, k int) []float32 {
	if !trans {
		return a[i*lda : i*lda+k]
	}
	r := make([]float32, k)
	for p := range r {
		r[p] = a[p*lda+i]
	}
	return r
}
