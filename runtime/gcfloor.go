package runtime

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// gcSteps is how many steps' allocations a worker's heap may grow by past
// what lives in it before the collector runs, at the least. A stage of a
// small model keeps a few MB alive and allocates as much every iteration:
// with the default (the heap doubling) a worker on one core collected more
// than once an iteration, each time holding the core its sends and
// receives wait for. A stage that allocates little keeps the default, and
// with it a heap the caches hold (bench/history.md has the figures).
const gcSteps = 8

// gcFloor sets the collector's percentage (debug.SetGCPercent) so that a
// collection comes after gcSteps steps' allocations past the live heap, or
// after the live heap's size again where that is more (the default's
// 100%). A GOGC in the environment is the user's choice and is left alone.
type gcFloor struct {
	mu      sync.Mutex // the workers of one process share it
	user    bool
	allocs  uint64 // the heap's allocations at the last adjust
	percent int    // the percentage set, 0 before the first
}

// workerGC is the process's: every worker adjusts it after its step.
var workerGC = newGCFloor()

func newGCFloor() *gcFloor {
	_, user := os.LookupEnv("GOGC")
	return &gcFloor{user: user}
}

// minLive is the least live heap the percentage is computed from, so that
// it stays bounded before the first collection has measured one.
const minLive = 4 << 20

// adjust sets the percentage for the live heap of the last collection and
// what was allocated since the last adjust (a step's, where each worker
// of the process adjusts after its step); it changes it only where the new
// one differs by more than a quarter.
func (g *gcFloor) adjust() {
	if g.user {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	var live, allocs uint64
	if s[0].Value.Kind() == metrics.KindUint64 {
		live = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		allocs = s[1].Value.Uint64()
	}
	step := allocs - min(allocs, g.allocs)
	g.allocs = allocs
	p := floorPercent(live, step)
	if g.percent == 0 || 4*p < 3*g.percent || 4*p > 5*g.percent {
		debug.SetGCPercent(p)
		g.percent = p
	}
}

// maxHeadroom bounds the growth gcSteps allows past the live heap: a stage
// whose activations take GBs a step collects as by default.
const maxHeadroom = 256 << 20

// floorPercent is the percentage that lets a heap of live bytes grow by
// gcSteps steps of step bytes (at most maxHeadroom), or by live where that
// is more.
func floorPercent(live, step uint64) int {
	return max(100, int(min(gcSteps*step, maxHeadroom)*100/max(live, minLive)))
}
