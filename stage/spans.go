package stage

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/graphpipe/graphpipe/stage/internal/kernel"
)

// pieceSize is the elements one piece of eachPiece covers: normBlock, so a
// squared norm's blocks are pieces.
const pieceSize = normBlock

// eachPiece runs f over every range k of sizes (0 ≤ k < len(sizes)), cut
// into pieces of pieceSize elements ([lo, hi) within range k), the pieces
// of all the ranges shared by one goroutine per core: one pass over many
// tensors, small ones included, keeps every core busy. Each piece runs on
// one goroutine, in order within itself; for element-wise loops the result
// does not depend on the cores.
func eachPiece(sizes []int, f func(k, lo, hi int)) {
	total := 0
	for _, n := range sizes {
		total += n
	}
	workers := min(runtime.GOMAXPROCS(0), total/kernel.MinSpan)
	if workers < 2 {
		for k, n := range sizes {
			for lo := 0; lo < n; lo += pieceSize {
				f(k, lo, min(n, lo+pieceSize))
			}
		}
		return
	}
	type piece struct{ k, lo, hi int }
	pieces := make([]piece, 0, total/pieceSize+len(sizes))
	for k, n := range sizes {
		for lo := 0; lo < n; lo += pieceSize {
			pieces = append(pieces, piece{k, lo, min(n, lo+pieceSize)})
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < len(pieces); i = int(next.Add(1)) - 1 {
				p := pieces[i]
				f(p.k, p.lo, p.hi)
			}
		}()
	}
	wg.Wait()
}
