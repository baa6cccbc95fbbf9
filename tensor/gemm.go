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
	bp := getBuf(kc * roundUp(min(n, nc), maxNR))
	defer putBuf(bp)
	aps := make([][]float32, workers)
	for w := range aps {
		aps[w] = getBuf(roundUp(mc, mr) * kc)
		defer putBuf(aps[w])
	}
	for jc := 0; jc < n; jc += nc {
		nb := min(nc, n-jc)
		step := kStep(k)
		for pc := 0; pc < k; pc += step {
			kb := min(step, k-pc)
			set := beta == 0 && pc == 0
			parallelPackB(transB, b, ldb, pc, jc, kb, nb, bp, workers)
			blocks := (m + mc - 1) / mc
			var wg sync.WaitGroup
			next := make(chan int, blocks)
			for ib := 0; ib < blocks; ib++ {
				next <- ib * mc
			}
			close(next)
			work := func(ap []float32) {
				for ic := range next {
					mb := min(mc, m-ic)
					packA(transA, a, lda, ic, pc, mb, kb, alpha, ap)
					macro(mb, nb, kb, ap, bp, c[ic*ldc+jc:], ldc, set)
				}
			}
			if workers == 1 {
				work(aps[0])
				continue
			}
			for w := 0; w < min(workers, blocks); w++ {
				wg.Add(1)
				go func(ap []float32) {
					defer wg.Done()
					work(ap)
				}(aps[w])
			}
			wg.Wait()
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

// packA copies alpha·op(A)[ic:ic+mb, pc:pc+kb] into mr-row slivers: sliver s
// holds, for each p, rows s·mr..s·mr+mr-1 (zero past mb).
func packA(trans bool, a []float32, lda, ic, pc, mb, kb int, alpha float32, ap []float32) {
	o := 0
	for s := 0; s < mb; s += mr {
		if !trans && s+mr <= mb {
			packRows(a, lda, ic+s, pc, kb, alpha, ap[o:o+mr*kb])
			o += mr * kb
			continue
		}
		if trans && s+mr <= mb { // op(A)'s six rows are six adjacent columns of A: a row of A gives each step of k
			for p := 0; p < kb; p++ {
				src := a[(pc+p)*lda+ic+s : (pc+p)*lda+ic+s+mr : (pc+p)*lda+ic+s+mr]
				d := ap[o : o+mr : o+mr]
				d[0], d[1], d[2], d[3], d[4], d[5] = alpha*src[0], alpha*src[1], alpha*src[2], alpha*src[3], alpha*src[4], alpha*src[5]
				o += mr
			}
			continue
		}
		for p := 0; p < kb; p++ {
			for r := 0; r < mr; r++ {
				if s+r < mb {
					ap[o] = alpha * at(a, trans, ic+s+r, pc+p, lda)
				} else {
					ap[o] = 0
				}
				o++
			}
		}
	}
}

// packRows interleaves six full rows of A[row:row+6, pc:pc+kb] into dst
// [kb·6], scaled by alpha. Every slice is cut to kb first, so the loop's
// loads and stores carry no bounds checks.
func packRows(a []float32, lda, row, pc, kb int, alpha float32, dst []float32) {
	o := row*lda + pc
	r0 := a[o : o+kb : o+kb]
	r1 := a[o+lda : o+lda+kb : o+lda+kb]
	r2 := a[o+2*lda : o+2*lda+kb : o+2*lda+kb]
	r3 := a[o+3*lda : o+3*lda+kb : o+3*lda+kb]
	r4 := a[o+4*lda : o+4*lda+kb : o+4*lda+kb]
	r5 := a[o+5*lda : o+5*lda+kb : o+5*lda+kb]
	r1, r2, r3, r4, r5 = r1[:len(r0)], r2[:len(r0)], r3[:len(r0)], r4[:len(r0)], r5[:len(r0)]
	dst = dst[:6*kb]
	if alpha == 1 {
		for p := range r0 {
			d := dst[:6:6]
			dst = dst[6:]
			d[0], d[1], d[2] = r0[p], r1[p], r2[p]
			d[3], d[4], d[5] = r3[p], r4[p], r5[p]
		}
		return
	}
	for p := range r0 {
		d := dst[:6:6]
		dst = dst[6:]
		d[0], d[1], d[2] = alpha*r0[p], alpha*r1[p], alpha*r2[p]
		d[3], d[4], d[5] = alpha*r3[p], alpha*r4[p], alpha*r5[p]
	}
}

// packB copies op(B)[pc:pc+kb, jc:jc+nb] into nr-column slivers: sliver s
// holds, for each p, columns s·nr..s·nr+nr-1 (zero past nb).
func packB(trans bool, b []float32, ldb, pc, jc, kb, nb int, bp []float32) {
	o := 0
	for s := 0; s < nb; s += nr {
		if trans && s+nr <= nb { // op(B)'s nr columns are nr rows of B: each row gives one column of the sliver
			sliver := bp[o : o+kb*nr : o+kb*nr]
			for j := 0; j < nr; j++ {
				row := b[(jc+s+j)*ldb+pc : (jc+s+j)*ldb+pc+kb : (jc+s+j)*ldb+pc+kb]
				for p, v := range row {
					sliver[p*nr+j] = v
				}
			}
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

// parallelPackB packs B's slivers in parallel, each worker a contiguous run.
func parallelPackB(trans bool, b []float32, ldb, pc, jc, kb, nb int, bp []float32, workers int) {
	slivers := (nb + nr - 1) / nr
	per := (slivers + workers - 1) / workers
	if workers == 1 || slivers < 2*workers {
		packB(trans, b, ldb, pc, jc, kb, nb, bp)
		return
	}
	var wg sync.WaitGroup
	for s0 := 0; s0 < slivers; s0 += per {
		s1 := min(slivers, s0+per)
		wg.Add(1)
		go func() {
			defer wg.Done()
			cols := min(nb, s1*nr) - s0*nr
			packB(trans, b, ldb, pc, jc+s0*nr, kb, cols, bp[s0*nr*kb:])
		}()
	}
	wg.Wait()
}

// macro runs the micro-kernel over every tile of a packed block:
// C[mb,nb] += Ap[mb,kb]·Bp[kb,nb], or C[mb,nb] = Ap·Bp when set (C unread).
func macro(mb, nb, kb int, ap, bp, c []float32, ldc int, set bool) {
	var tmp [mr * maxNR]float32
	for j := 0; j < nb; j += nr {
		bs := bp[j*kb:]
		for i := 0; i < mb; i += mr {
			as := ap[i*kb:]
			if i+mr <= mb && j+nr <= nb {
				kernel(kb, as, bs, c[i*ldc+j:], ldc, set)
				continue
			}
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
// packed slivers (a: 6 per step of k, b: nr per step), C with stride ldc;
// C = A·B when set (C unread).
func kernelGo(k int, a, b, c []float32, ldc int, set bool) {
	var acc [mr][maxNR]float32
	for p := 0; p < k; p++ {
		bv := b[p*nr : p*nr+nr : p*nr+nr]
		av := a[p*mr : p*mr+mr : p*mr+mr]
		for r := 0; r < mr; r++ {
			x := av[r]
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
