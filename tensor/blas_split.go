package tensor

import (
	"math"
	"sync"
	"sync/atomic"
)

// The library runs single-threaded (set as it loads) and Sgemm parallelizes
// over goroutines itself: OpenBLAS's own threads, on a machine whose cores
// the Go scheduler already uses, spin between calls and thread products
// too small to pay for it (bench/history.md has the figures); one thread
// per call, on goroutines the Go scheduler places, leaves neither.

// splitFlops is the product size, 2·m·n·k floating-point operations, from
// which libSgemm cuts a product into GOMAXPROCS parts (a variable for the
// tests and the benchmark that measured it).
var splitFlops atomicFloat

func init() { splitFlops.Store(defaultSplitFlops) }

// defaultSplitFlops: below it one call on one core is faster than two
// halves on two (measured by BenchmarkSplitThreshold).
const defaultSplitFlops = 1 << 23

// atomicFloat is a float64 read and written atomically.
type atomicFloat struct{ bits atomic.Uint64 }

func (f *atomicFloat) Load() float64   { return math.Float64frombits(f.bits.Load()) }
func (f *atomicFloat) Store(v float64) { f.bits.Store(math.Float64bits(v)) }

// splitAlign is the granularity of a part's rows or columns, a multiple of
// every library's register tile.
const splitAlign = 16

// partFunc computes the part of C [m,n] (as op(A) [m,k]·op(B) [k,n]) whose
// operands start at a[ao], b[bo] and c[co], with the caller's strides.
type partFunc func(transA, transB bool, m, n, k, ao, bo, co int)

// splitGemm cuts C [m,n] into parts blocks along its longer side (rows
// when m ≥ n), each a multiple of splitAlign but the last, and runs run on
// each: the first on the calling goroutine, the others on their own. Each
// element of C is computed by one call, over all of k.
func splitGemm(parts int, transA, transB bool, m, n, k int, run partFunc, lda, ldb, ldc int) {
	long := max(m, n)
	per := roundUp((long+parts-1)/parts, splitAlign)
	if parts <= 1 || per >= long {
		run(transA, transB, m, n, k, 0, 0, 0)
		return
	}
	part := func(lo int) {
		size := min(per, long-lo)
		if m >= n { // rows lo.. of op(A) and C
			ao := lo * lda
			if transA {
				ao = lo
			}
			run(transA, transB, size, n, k, ao, 0, lo*ldc)
			return
		}
		bo := lo // columns lo.. of op(B) and C
		if transB {
			bo = lo * ldb
		}
		run(transA, transB, m, size, k, 0, bo, lo)
	}
	var wg sync.WaitGroup
	for lo := per; lo < long; lo += per {
		wg.Add(1)
		go func() {
			defer wg.Done()
			part(lo)
		}()
	}
	part(0)
	wg.Wait()
}

// eachRun cuts 0..count-1 into parts contiguous runs and calls run on each,
// the first on the calling goroutine.
func eachRun(parts, count int, run func(lo, hi int)) {
	per := (count + parts - 1) / max(parts, 1)
	if parts <= 1 || per >= count {
		run(0, count)
		return
	}
	var wg sync.WaitGroup
	for lo := per; lo < count; lo += per {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(lo, min(count, lo+per))
		}()
	}
	run(0, per)
	wg.Wait()
}
