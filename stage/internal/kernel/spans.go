package kernel

import (
	"runtime"
	"sync"
)

// MinSpan is the fewest elements a goroutine of EachSpan is given: below
// it, starting one costs more than the loop it would run.
const MinSpan = 1 << 16

// EachSpan runs f over [0, n) cut into contiguous spans, one per core
// (fewer where n is small). For element-wise loops (each index written
// from its own inputs alone) the result does not depend on the cut.
func EachSpan(n int, f func(lo, hi int)) {
	workers := min(runtime.GOMAXPROCS(0), n/MinSpan)
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

// EachItem runs f for every item 0..count-1 (attention's (sample, head)
// pairs, the synthetic data's samples), split over the cores when each
// item's work (in multiply-adds) makes the whole worth goroutines. Items
// write disjoint parts of their outputs, so the result does not depend on
// the split.
func EachItem(count, work int, f func(bh int)) {
	workers := min(runtime.GOMAXPROCS(0), count)
	if workers < 2 || count*work < 1<<17 {
		for bh := 0; bh < count; bh++ {
			f(bh)
		}
		return
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for bh := w; bh < count; bh += workers {
				f(bh)
			}
		}()
	}
	wg.Wait()
}
