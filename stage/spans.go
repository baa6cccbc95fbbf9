package stage

import (
	"runtime"
	"sync"
)

// minSpan is the fewest elements a goroutine of eachSpan is given: below
// it, starting one costs more than the loop it would run.
const minSpan = 1 << 16

// eachSpan runs f over [0, n) cut into contiguous spans, one per core
// (fewer where n is small). For element-wise loops (each index written
// from its own inputs alone) the result does not depend on the cut.
func eachSpan(n int, f func(lo, hi int)) {
	workers := min(runtime.GOMAXPROCS(0), n/minSpan)
	if workers < 2 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		lo, hi := n*w/workers, n*(w+1)/workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(lo, hi)
		}()
	}
	wg.Wait()
}

// addIntoSpans is addInto split over the cores.
func addIntoSpans(dst, src []float32) {
	eachSpan(len(dst), func(lo, hi int) { addInto(dst[lo:hi], src[lo:hi]) })
}
