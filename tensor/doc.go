// Package tensor owns float32 arrays and their kernels: the CPU backend here,
// and the CUDA backend beside it in package tensor/cuda.
//
// The contract:
//
//  1. A Tensor is a row-major float32 array with a shape; Data has exactly
//     the product of the shape's dims elements.
//  2. Sgemm computes C = alpha·op(A)·op(B) + beta·C on row-major matrices. It
//     packs panels of A and B and runs a 6×32 register-tiled micro-kernel in
//     AVX-512 assembly, 6×16 in AVX2/FMA assembly, or 6×16 in Go (whichever
//     the CPU has), in parallel over parts of C's longer side, one packed
//     product per worker; with beta 0 C is never read (its first block of k
//     is stored, not added); products of at most 1024 multiply-adds (8192
//     with AVX2 and 8 columns or more) skip the packing (sgemmTiny). The Go
//     kernels' results do not depend on the number of cores.
//  3. Every fast kernel keeps its naive counterpart (SgemmNaive) as the
//     oracle its tests compare against.
//  4. Where an optimized CBLAS is installed (OpenBLAS, BLIS or MKL, found by
//     their sonames) or named by GRAPHPIPE_BLAS=/path/lib.so, Sgemm hands it
//     every product past sgemmTiny's, called through purego without cgo
//     (blas.go, blas_loader.go); GRAPHPIPE_BLAS=go, or no library, runs the
//     Go kernels (SgemmGo). The reference BLAS is never looked for. The
//     library runs one thread per call; a product of at least splitFlops
//     (2·m·n·k) is cut along C's longer side into GOMAXPROCS parts (a
//     worker's share of the cores), each a library call on its own
//     goroutine, and batched products below it are shared out in runs
//     (blas_split.go): no library threads spin beside the Go scheduler's.
//     A library named that does not load (or is not a regular file: dlopen
//     blocks on a FIFO) is a BLASLoadError naming it and the symbol. The Go
//     kernels are the library's oracle: its results agree with theirs to
//     float32 rounding, not bit for bit, and a library is held to them on a
//     few small products as it loads (blas_check.go): one that computes a
//     wrong product (a cblas_sgemm that does nothing) is a BLASCheckError,
//     never used.
//  5. Kernels comment their shapes; backward kernels accumulate (+=).
//  6. Exp, GELU and GELUGrad run element-wise in AVX2/FMA assembly where the
//     CPU has it, within a few float32 ulps of their float64 oracles
//     (ExpNaive, GELUNaive, GELUGradNaive), special values included; the
//     methods and their sources are in vmath.go.
package tensor
