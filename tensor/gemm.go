package tensor

import (
	"runtime"
	"sync"
)

// Register tile and cache blocks. A 6×nr tile of C lives in twelve vector
// registers: nr is 16 with AVX2 (8-wide), 32 with AVX-512 (16-wide), set by
// the kernel chosen at start-up. A product with k ≤ kc runs in one block of
// k; a deeper one in equal blocks of at most kcSplit (kStep): kcSplit·nr
// floats of B (10 or 20 KiB) then stay in L1 beside A's sliver and C's
// tile, which at 4 KiB row strides (n = 1024) all fall in the same L1 sets
// (kc-deep blocks measured 5-10% slower there). MC·KC of A (72 KiB) in L2.
const (
	mr      = 6
	maxNR   = 32
	kc      = 256
	kcSplit = 160
	mc      = 72
	nc      = 3072
)

// nr is the micro-kernel's tile width.
var nr = 16

// Sgemm computes C = alpha·op(A)·op(B) + beta·C with the shapes of
// SgemmNaive: on the system BLAS where one is loaded (blas.go) and the
// product is larger than sgemmTiny's, on the Go kernels (SgemmGo) otherwise.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if l := library(); l != nil && k > 0 && alpha != 0 && !isTiny(m, n, k) {
		l.libSgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	SgemmGo(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// SgemmGo is Sgemm on the Go kernels alone, whatever library is loaded.
func SgemmGo(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scale(m, n, beta, c, ldc)
		return
	}
	if isTiny(m, n, k) {
		scale(m, n, beta, c, ldc)
		sgemmTiny(transA, transB, m, n, k, alpha, a, lda, b, ldb, c, ldc)
		return
	}
	if beta != 0 { // beta 0: the first block of k stores C's tiles instead (macro's set)
		scale(m, n, beta, c, ldc)
	}
	workers := 1 // below smallGemm goroutines cost more than they save
	if 2*float64(m)*float64(n)*float64(k) >= smallGemm {
		workers = runtime.GOMAXPROCS(0)
	}
	set := beta == 0
	if workers == 1 {
		sgemmPacked(transA, transB, m, n, k, alpha, a, lda, b, ldb, set, c, ldc)
		return
	}
	// Each worker a product of its own: C's longer side cut into workers
	// parts (whole tiles), each packing its share of the longer operand and
	// all of the shorter one. Shared packed panels needed two barriers per
	// block of k, and on a shared machine a core held up at one held up
	// both (interleaved at 2 threads: 0.87-0.88 of this at 512, 0.93-0.99 at
	// 1024).
	var wg sync.WaitGroup
	rows := m >= n
	long, tile := n, nr
	if rows {
		long, tile = m, mr
	}
	per := roundUp((long+workers-1)/workers, tile)
	for s0 := 0; s0 < long; s0 += per {
		s1 := min(long, s0+per)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if rows {
				sgemmPacked(transA, transB, s1-s0, n, k, alpha, a[offset(transA, s0, 0, lda):], lda, b, ldb, set, c[s0*ldc:], ldc)
				return
			}
			sgemmPacked(transA, transB, m, s1-s0, k, alpha, a, lda, b[offset(transB, 0, s0, ldb):], ldb, set, c[s0:], ldc)
		}()
	}
	wg.Wait()
}

// offset is the index of op(X)[r, col] in X with leading dimension ld.
func offset(trans bool, r, col, ld int) int {
	if trans {
		return col*ld + r
	}
	return r*ld + col
}

// sgemmPacked is SgemmGo's packed product on one goroutine: C += alpha·
// op(A)·op(B), or C = alpha·op(A)·op(B) when set (C unread).
func sgemmPacked(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, set bool, c []float32, ldc int) {
	bp := getBuf(kc * roundUp(min(n, nc), maxNR))
	defer putBuf(bp)
	ap := getBuf(mc * kc)
	defer putBuf(ap)
	step := kStep(k)
	for jc := 0; jc < n; jc += nc {
		nb := min(nc, n-jc)
		for pc := 0; pc < k; pc += step {
			kb := min(step, k-pc)
			packB(transB, b, ldb, pc, jc, kb, nb, bp)
			for ic := 0; ic < m; ic += mc {
				mb := min(mc, m-ic)
				packA(transA, a, lda, ic, pc, mb, kb, alpha, ap)
				macro(mb, nb, kb, ap, bp, c[ic*ldc+jc:], ldc, set && pc == 0)
			}
		}
	}
}

// kStep is the depth of SgemmGo's blocks of k: all of k up to kc (one
// pass, C stored rather than read when beta is 0), else equal blocks of at
// most kcSplit.
func kStep(k int) int {
	if k <= kc {
		return k
	}
	n := (k + kcSplit - 1) / kcSplit
	return (k + n - 1) / n
}

func roundUp(x, to int) int { return (x + to - 1) / to * to }

// smallGemm is the FLOP count under which a product runs on one goroutine.
const smallGemm = 1 << 22

// bufs pools packing buffers across calls.
var bufs sync.Pool

func getBuf(n int) []float32 {
	if b, ok := bufs.Get().(*[]float32); ok && cap(*b) >= n {
		return (*b)[:n]
	}
	return make([]float32, n)
}

func putBuf(b []float32) { bufs.Put(&b) }

// scale multiplies C [m,n] by beta (0 clears it, even of NaNs).
func scale(m, n int, beta float32, c []float32, ldc int) {
	if beta == 1 {
		return
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// packA copies alpha·op(A)[ic:ic+mb, pc:pc+kb] into mr-row slivers of
// mr·kb floats: sliver s holds rows s·mr..s·mr+mr-1 one after another, each
// kb long (zero past mb). The micro-kernels broadcast from the six rows at
// a stride of kb, so a non-transposed A packs by row copies.
func packA(trans bool, a []float32, lda, ic, pc, mb, kb int, alpha float32, ap []float32) {
	o := 0
	for s := 0; s < mb; s += mr {
		d := ap[o : o+mr*kb : o+mr*kb]
		o += mr * kb
		switch {
		case !trans && s+mr <= mb:
			packRows(a, lda, ic+s, pc, kb, alpha, d)
		case trans && s+mr <= mb:
			packCols(a, lda, ic+s, pc, kb, alpha, d)
		default:
			for r := 0; r < mr; r++ {
				row := d[r*kb : r*kb+kb]
				for p := range row {
					if s+r < mb {
						row[p] = alpha * at(a, trans, ic+s+r, pc+p, lda)
					} else {
						row[p] = 0
					}
				}
			}
		}
	}
}

// packRows copies six full rows of A[row:row+6, pc:pc+kb] into dst [6·kb],
// scaled by alpha.
func packRows(a []float32, lda, row, pc, kb int, alpha float32, dst []float32) {
	for r := 0; r < mr; r++ {
		src := a[(row+r)*lda+pc : (row+r)*lda+pc+kb]
		d := dst[r*kb : r*kb+kb]
		if alpha == 1 {
			copy(d, src)
			continue
		}
		for p, v := range src {
			d[p] = alpha * v
		}
	}
}

// packCols is packRows for a transposed A: op(A)'s six rows are six
// adjacent columns of A, so each row of A gives one step of k of all six.
func packCols(a []float32, lda, col, pc, kb int, alpha float32, dst []float32) {
	d0, d1, d2 := dst[0:kb], dst[kb:2*kb], dst[2*kb:3*kb]
	d3, d4, d5 := dst[3*kb:4*kb], dst[4*kb:5*kb], dst[5*kb:6*kb]
	for p := range d0 {
		src := a[(pc+p)*lda+col : (pc+p)*lda+col+mr : (pc+p)*lda+col+mr]
		d0[p], d1[p], d2[p] = alpha*src[0], alpha*src[1], alpha*src[2]
		d3[p], d4[p], d5[p] = alpha*src[3], alpha*src[4], alpha*src[5]
	}
}

// packB copies op(B)[pc:pc+kb, jc:jc+nb] into nr-column slivers: sliver s
// holds, for each p, columns s·nr..s·nr+nr-1 (zero past nb).
func packB(trans bool, b []float32, ldb, pc, jc, kb, nb int, bp []float32) {
	o := 0
	for s := 0; s < nb; s += nr {
		if trans && s+nr <= nb { // op(B)'s nr columns are nr rows of B: each row gives one column of the sliver
			transRows(b[(jc+s)*ldb+pc:], ldb, kb, bp[o:o+kb*nr:o+kb*nr])
			o += kb * nr
			continue
		}
		if !trans && s+nr <= nb {
			copyRows(kb, b[pc*ldb+jc+s:], ldb, bp[o:o+kb*nr])
			o += kb * nr
			continue
		}
		for p := 0; p < kb; p++ {
			for j := 0; j < nr; j++ {
				if s+j < nb {
					bp[o] = at(b, trans, pc+p, jc+s+j, ldb)
				} else {
					bp[o] = 0
				}
				o++
			}
		}
	}
}

// macro runs the micro-kernel over every tile of a packed block:
// C[mb,nb] += Ap[mb,kb]·Bp[kb,nb], or C[mb,nb] = Ap·Bp when set (C unread).
func macro(mb, nb, kb int, ap, bp, c []float32, ldc int, set bool) {
	var tmp [mr * maxNR]float32
	for j := 0; j < nb; j += nr {
		bs := bp[j*kb:]
		i := 0
		if j+nr <= nb && mb >= mr { // the full tiles down this column in one call
			i = mb / mr * mr
			kernelTiles(mb/mr, kb, ap, bs, c[j:], ldc, set)
		}
		for ; i < mb; i += mr { // edge tiles: through tmp
			as := ap[i*kb:]
			kernel(kb, as, bs, tmp[:mr*nr], nr, true)
			for r := 0; r < min(mr, mb-i); r++ {
				row := c[(i+r)*ldc+j : (i+r)*ldc+j+min(nr, nb-j)]
				t := tmp[r*nr : r*nr+len(row)]
				if set {
					copy(row, t)
					continue
				}
				for q := range row {
					row[q] += t[q]
				}
			}
		}
	}
}

// kernelGo is the portable micro-kernel: C[6,nr] += A[6,k]·B[k,nr] from
// packed slivers (a: six rows of k, b: nr per step of k), C with stride
// ldc; C = A·B when set (C unread).
func kernelGo(k int, a, b, c []float32, ldc int, set bool) {
	var acc [mr][maxNR]float32
	for p := 0; p < k; p++ {
		bv := b[p*nr : p*nr+nr : p*nr+nr]
		for r := 0; r < mr; r++ {
			x := a[r*k+p]
			row := &acc[r]
			for q := 0; q < nr; q++ {
				row[q] += x * bv[q]
			}
		}
	}
	for r := 0; r < mr; r++ {
		row := c[r*ldc : r*ldc+nr]
		if set {
			copy(row, acc[r][:nr])
			continue
		}
		for q := range row {
			row[q] += acc[r][q]
		}
	}
}

// copyRowsGo copies k rows of nr floats, lds apart in src, into dst
// [k·nr]: packB's sliver of a non-transposed B.
func copyRowsGo(k int, src []float32, lds int, dst []float32) {
	for p := 0; p < k; p++ {
		copy(dst[p*nr:p*nr+nr], src[p*lds:p*lds+nr])
	}
}

// transRows writes the nr rows of src (kb long, ldb apart) as the columns
// of dst [kb, nr], eight rows at a time: each step of k stores eight
// adjacent floats, and eight rows stream in at once.
func transRows(src []float32, ldb, kb int, dst []float32) {
	w := nr
	for j := 0; j < w; j += 8 {
		o := j * ldb
		r0 := src[o : o+kb : o+kb]
		r1 := src[o+ldb : o+ldb+kb : o+ldb+kb]
		r2 := src[o+2*ldb : o+2*ldb+kb : o+2*ldb+kb]
		r3 := src[o+3*ldb : o+3*ldb+kb : o+3*ldb+kb]
		r4 := src[o+4*ldb : o+4*ldb+kb : o+4*ldb+kb]
		r5 := src[o+5*ldb : o+5*ldb+kb : o+5*ldb+kb]
		r6 := src[o+6*ldb : o+6*ldb+kb : o+6*ldb+kb]
		r7 := src[o+7*ldb : o+7*ldb+kb : o+7*ldb+kb]
		r1, r2, r3, r4, r5, r6, r7 = r1[:len(r0)], r2[:len(r0)], r3[:len(r0)], r4[:len(r0)], r5[:len(r0)], r6[:len(r0)], r7[:len(r0)]
		d := dst[j:]
		for p := range r0 {
			q := d[p*w : p*w+8 : p*w+8]
			q[0], q[1], q[2], q[3] = r0[p], r1[p], r2[p], r3[p]
			q[4], q[5], q[6], q[7] = r4[p], r5[p], r6[p], r7[p]
		}
	}
}
