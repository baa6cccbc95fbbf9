package stage

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// gcSteps is how many steps' allocations a heap may grow by past what
// lives in it before the collector runs, at the least (up to
// maxHeadroom). A stage of a small model keeps a few MB alive and
// allocates as much every iteration: with the default (the heap doubling)
// a worker on one core collected more than once an iteration, each time
// holding the core its sends and receives wait for. A stage that
// allocates little keeps the default, and with it a heap the caches hold
// (bench/history.md has the figures).
const gcSteps = 8

// gcCeilSteps is how many steps' allocations a large heap grows by past
// what lives in it where that is more than maxHeadroom: rather than the
// default's doubling. A model whose training state takes GBs (the default
// mlp: 2 GB of parameters, gradients and Adam's moments, 210 MB of
// activations a step) would otherwise take twice its state in memory, and
// every step until the first collection would take fresh pages from the
// system, 54 thousand page faults a step; collected every two steps, its
// heap is its state and two steps' allocations, and the third step on
// reuses memory (bench/history.md).
const gcCeilSteps = 2

// gcPacer sets the collector's percentage (debug.SetGCPercent) from the
// live heap and a step's allocations (pacePercent). A GOGC in the
// environment is the user's choice and is left alone.
type gcPacer struct {
	mu      sync.Mutex // the workers of one process share it
	user    bool
	allocs  uint64 // the heap's allocations at the last adjust
	percent int    // the percentage set, 0 before the first
}

// processGC is the process's: every trainer and worker adjusts it after
// its step (PaceGC).
var processGC = newGCPacer()

func newGCPacer() *gcPacer {
	_, user := os.LookupEnv("GOGC")
	return &gcPacer{user: user}
}

// PaceGC sets the collector's pace for the live heap and what was
// allocated since the last call (a step's: a Trainer calls it after each
// optimizer step, a runtime worker after its update); the workers of one
// process share it. With GOGC in the environment it does nothing.
func PaceGC() { processGC.adjust() }

// minLive is the least live heap the percentage is computed from, so that
// it stays bounded before the first collection has measured one.
const minLive = 4 << 20

// adjust sets the percentage for the live heap of the last collection and
// what was allocated since the last adjust (a step's, where each worker
// of the process adjusts after its step); it changes it only where the new
// one differs by more than a quarter.
func (g *gcPacer) adjust() {
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
	p := pacePercent(live, step)
	if g.percent == 0 || 4*p < 3*g.percent || 4*p > 5*g.percent {
		debug.SetGCPercent(p)
		g.percent = p
	}
}

// maxHeadroom bounds the growth gcSteps allows past the live heap, and
// the default's doubling: past it, a heap grows by gcCeilSteps steps'
// allocations (or by maxHeadroom, where that is more).
const maxHeadroom = 256 << 20

// pacePercent is the percentage that lets a heap of live bytes grow by
// gcSteps steps of step bytes or by live, whichever is more, each at most
// maxHeadroom; and by gcCeilSteps steps where that is more still. At least
// 1.
func pacePercent(live, step uint64) int {
	live = max(live, minLive)
	growth := max(min(gcSteps*step, maxHeadroom), min(live, maxHeadroom), gcCeilSteps*step)
	return max(1, int(growth*100/live))
}
