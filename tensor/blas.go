package tensor

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
)

// The system BLAS: where an optimized CBLAS is installed (OpenBLAS, BLIS or
// MKL, found by their sonames) or named by GRAPHPIPE_BLAS, Sgemm hands it
// every product larger than sgemmTiny's, through purego (no cgo); otherwise,
// and with GRAPHPIPE_BLAS=go, the Go kernels run. The library runs one
// thread per call, set as it loads; a large product is split over
// GOMAXPROCS goroutines, the process's share of the cores (a local run gives
// each worker process its share), as blas_split.go says.

// BLASInfo says which library computes Sgemm's products.
type BLASInfo struct {
	// Name is "openblas", "blis" or "mkl"; "cblas" for another library
	// named by path (the reference BLAS); "go" for the Go kernels.
	Name    string `json:"name"`
	Path    string `json:"path,omitempty"`    // the file loaded
	Version string `json:"version,omitempty"` // what the library says of itself
	Threads int    `json:"threads,omitempty"` // the goroutines a large product is split over (GOMAXPROCS)
	// Why is why the Go kernels run: "GRAPHPIPE_BLAS=go", "no optimized
	// BLAS installed", or the error loading the library named.
	Why string `json:"why,omitempty"`
}

func (b BLASInfo) String() string {
	if b.Name == "go" {
		return "go kernels (" + b.Why + ")"
	}
	s := b.Name
	if b.Version != "" {
		s += " " + b.Version
	}
	threads := "threads"
	if b.Threads == 1 {
		threads = "thread"
	}
	return fmt.Sprintf("%s (%s, %d %s)", s, b.Path, b.Threads, threads)
}

// blas is the loaded library (nil: the Go kernels), set once by LoadBLAS.
var blas struct {
	once sync.Once
	lib  *blasLib
	err  error
	why  string
	off  atomic.Bool // UseGoKernels
}

// LoadBLAS loads the library GRAPHPIPE_BLAS names, or finds one, once per
// process (Sgemm calls it). The error is the library named by path that did
// not load (the Go kernels run instead): a caller that was told to use it
// should stop.
func LoadBLAS() (BLASInfo, error) {
	load()
	return info(), blas.err
}

// load is LoadBLAS without the report: what every product calls.
func load() {
	blas.once.Do(func() {
		blas.lib, blas.err = loadBLAS()
		switch {
		case blas.err != nil:
			blas.why = blas.err.Error()
		case blas.lib == nil && BLASChoice() == "go":
			blas.why = BLASEnv + "=go"
		case blas.lib == nil:
			blas.why = "no optimized BLAS installed"
		}
	})
}

// BLASChoice is GRAPHPIPE_BLAS as set, "auto" when unset.
func BLASChoice() string {
	if v := os.Getenv(BLASEnv); v != "" {
		return v
	}
	return "auto"
}

// BLAS says which library Sgemm uses (loading it first).
func BLAS() BLASInfo {
	LoadBLAS()
	return info()
}

func info() BLASInfo {
	l := blas.lib
	if l == nil {
		return BLASInfo{Name: "go", Why: blas.why}
	}
	return BLASInfo{Name: l.vendor, Path: l.path, Version: l.version, Threads: runtime.GOMAXPROCS(0)}
}

// library is the loaded BLAS, nil for the Go kernels.
func library() *blasLib {
	load()
	if blas.off.Load() {
		return nil
	}
	return blas.lib
}

// UseGoKernels makes Sgemm run the Go kernels (on) or the loaded library
// again (off), and returns what it was: for tests that set the two side by
// side in one process. It does not change what BLAS reports.
func UseGoKernels(on bool) bool { return blas.off.Swap(on) }

// libSgemm is Sgemm on l, after the checks Go's bounds would make: the
// library reads and writes exactly what Sgemm's arguments cover. The
// library runs one thread per call; a product of at least splitFlops
// floating-point operations is cut into GOMAXPROCS parts along C's longer
// side, each part a call on its own goroutine (splitGemm).
func (l *blasLib) libSgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkOperand("A", transA, m, k, a, lda)
	checkOperand("B", transB, k, n, b, ldb)
	checkOperand("C", false, m, n, c, ldc)
	parts := 1
	if 2*float64(m)*float64(n)*float64(k) >= splitFlops.Load() {
		parts = runtime.GOMAXPROCS(0)
	}
	splitGemm(parts, transA, transB, m, n, k, func(ta, tb bool, m, n, k, ao, bo, co int) {
		l.sgemm(cblasRowMajor, cblasOp(ta), cblasOp(tb), int32(m), int32(n), int32(k),
			alpha, &a[ao], int32(lda), &b[bo], int32(ldb), beta, &c[co], int32(ldc))
	}, lda, ldb, ldc)
}

func cblasOp(trans bool) int32 {
	if trans {
		return cblasTrans
	}
	return cblasNoTrans
}

// checkOperand panics, as an index out of range would, when x cannot hold
// op(X) [rows, cols] with stride ld (rows, cols ≥ 1).
func checkOperand(name string, trans bool, rows, cols int, x []float32, ld int) {
	if trans {
		rows, cols = cols, rows
	}
	if ld < cols || (rows-1)*ld+cols > len(x) {
		panic(fmt.Sprintf("tensor: Sgemm's %s [%d,%d] with stride %d does not fit in %d values", name, rows, cols, ld, len(x)))
	}
}

// LibrarySgemm is the loaded library's sgemm with Sgemm's arguments, for
// every size (the tiny products included), or nil when the Go kernels run:
// what the benchmarks set the Go kernels against.
func LibrarySgemm() func(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	l := library()
	if l == nil {
		return nil
	}
	return func(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
		if m == 0 || n == 0 {
			return
		}
		if k == 0 {
			scale(m, n, beta, c, ldc)
			return
		}
		l.libSgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	}
}

// SgemmBatched is Sgemm on batch products laid at fixed strides: product i
// reads A at a[i·strideA:], B at b[i·strideB:] and writes C at
// c[i·strideC:], each with Sgemm's shapes. The library's
// cblas_sgemm_batch_strided runs them where it has one (MKL, OpenBLAS from
// 0.3.27) and the products are past sgemmTiny's; otherwise Sgemm runs each
// in turn. Products each below splitFlops but together past it are shared
// out to GOMAXPROCS goroutines in contiguous runs (each product computed
// as alone, so the split changes no result).
func SgemmBatched(transA, transB bool, m, n, k int, alpha float32, a []float32, lda, strideA int, b []float32, ldb, strideB int, beta float32, c []float32, ldc, strideC int, batch int) {
	if batch == 0 || m == 0 || n == 0 {
		return
	}
	l := library()
	strided := l != nil && l.sgemmStrided != nil && k > 0 && alpha != 0 && !isTiny(m, n, k)
	if strided {
		checkBatch("A", transA, m, k, a, lda, strideA, batch)
		checkBatch("B", transB, k, n, b, ldb, strideB, batch)
		checkBatch("C", false, m, n, c, ldc, strideC, batch)
	}
	run := func(i0, i1 int) { // products i0..i1-1
		if strided {
			l.sgemmStrided(cblasRowMajor, cblasOp(transA), cblasOp(transB), int32(m), int32(n), int32(k), alpha,
				&a[i0*strideA], int32(lda), int32(strideA), &b[i0*strideB], int32(ldb), int32(strideB), beta, &c[i0*strideC], int32(ldc), int32(strideC), int32(i1-i0))
			return
		}
		for i := i0; i < i1; i++ {
			Sgemm(transA, transB, m, n, k, alpha, a[i*strideA:], lda, b[i*strideB:], ldb, beta, c[i*strideC:], ldc)
		}
	}
	each, parts := 2*float64(m)*float64(n)*float64(k), 1
	if split := splitFlops.Load(); each < split && each*float64(batch) >= split {
		parts = min(runtime.GOMAXPROCS(0), batch)
	}
	eachRun(parts, batch, run)
}

// checkBatch is checkOperand for the last of batch operands.
func checkBatch(name string, trans bool, rows, cols int, x []float32, ld, stride, batch int) {
	checkOperand(name, trans, rows, cols, x[(batch-1)*stride:], ld)
}
