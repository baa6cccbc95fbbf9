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
// and with GRAPHPIPE_BLAS=go, the Go kernels run. The library's threads are
// set to GOMAXPROCS, the process's share of the cores (a local run gives
// each worker process its share), and follow it when it changes.

// BLASInfo says which library computes Sgemm's products.
type BLASInfo struct {
	// Name is "openblas", "blis" or "mkl"; "cblas" for another library
	// named by path (the reference BLAS); "go" for the Go kernels.
	Name    string `json:"name"`
	Path    string `json:"path,omitempty"`    // the file loaded
	Version string `json:"version,omitempty"` // what the library says of itself
	Threads int    `json:"threads,omitempty"` // its thread count when last set
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
	once    sync.Once
	lib     *blasLib
	err     error
	why     string
	threads atomic.Int32 // what setThreads was last given
	off     atomic.Bool  // UseGoKernels
	mu      sync.Mutex   // guards setThreads
}

// LoadBLAS loads the library GRAPHPIPE_BLAS names, or finds one, once per
// process (Sgemm calls it). The error is the library named by path that did
// not load (the Go kernels run instead): a caller that was told to use it
// should stop.
func LoadBLAS() (BLASInfo, error) {
	blas.once.Do(func() {
		blas.lib, blas.err = loadBLAS()
		switch {
		case blas.err != nil:
			blas.why = blas.err.Error()
		case blas.lib == nil && BLASChoice() == "go":
			blas.why = BLASEnv + "=go"
		case blas.lib == nil:
			blas.why = "no optimized BLAS installed"
		default:
			blas.lib.follow()
		}
	})
	return info(), blas.err
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
	return BLASInfo{Name: l.vendor, Path: l.path, Version: l.version, Threads: int(blas.threads.Load())}
}

// follow sets the library's threads to GOMAXPROCS when they differ.
func (l *blasLib) follow() {
	n := int32(runtime.GOMAXPROCS(0))
	if blas.threads.Load() == n || l.setThreads == nil {
		return
	}
	blas.mu.Lock()
	defer blas.mu.Unlock()
	if blas.threads.Load() != n {
		l.setThreads(n)
		blas.threads.Store(n)
	}
}

// library is the loaded BLAS, nil for the Go kernels.
func library() *blasLib {
	LoadBLAS()
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
// library reads and writes exactly what Sgemm's arguments cover.
func (l *blasLib) libSgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkOperand("A", transA, m, k, a, lda)
	checkOperand("B", transB, k, n, b, ldb)
	checkOperand("C", false, m, n, c, ldc)
	l.follow()
	l.sgemm(cblasRowMajor, cblasOp(transA), cblasOp(transB), int32(m), int32(n), int32(k),
		alpha, &a[0], int32(lda), &b[0], int32(ldb), beta, &c[0], int32(ldc))
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
// cblas_sgemm_batch_strided runs them in one call where it has one (MKL,
// OpenBLAS from 0.3.27) and the products are past sgemmTiny's; otherwise
// Sgemm runs each in turn.
func SgemmBatched(transA, transB bool, m, n, k int, alpha float32, a []float32, lda, strideA int, b []float32, ldb, strideB int, beta float32, c []float32, ldc, strideC int, batch int) {
	if batch == 0 || m == 0 || n == 0 {
		return
	}
	if l := library(); batch > 1 && l != nil && l.sgemmStrided != nil && k > 0 && alpha != 0 && m*n*k > tinyGemm {
		checkBatch("A", transA, m, k, a, lda, strideA, batch)
		checkBatch("B", transB, k, n, b, ldb, strideB, batch)
		checkBatch("C", false, m, n, c, ldc, strideC, batch)
		l.follow()
		l.sgemmStrided(cblasRowMajor, cblasOp(transA), cblasOp(transB), int32(m), int32(n), int32(k), alpha,
			&a[0], int32(lda), int32(strideA), &b[0], int32(ldb), int32(strideB), beta, &c[0], int32(ldc), int32(strideC), int32(batch))
		return
	}
	for i := 0; i < batch; i++ {
		Sgemm(transA, transB, m, n, k, alpha, a[i*strideA:], lda, b[i*strideB:], ldb, beta, c[i*strideC:], ldc)
	}
}

// checkBatch is checkOperand for the last of batch operands.
func checkBatch(name string, trans bool, rows, cols int, x []float32, ld, stride, batch int) {
	checkOperand(name, trans, rows, cols, x[(batch-1)*stride:], ld)
}
