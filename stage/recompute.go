package stage

import (
	"github.com/graphpipe/graphpipe/stage/internal/kernel"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// Activation recomputation (Executor.Recompute): after a micro-batch's
// Forward the executor keeps only what it was fed (on a device, the
// uploads of the fed values and the staged outputs the stage sends on);
// its Backward reruns the forward from those feeds before going back.
// Every kernel is a function of its inputs and parameters, which no
// optimizer step changes inside an iteration; dropout draws its masks from
// (seed, step, op, sample) (Position, restored from the micro-batch); and
// batch_norm normalises by the statistics of the same input again but does
// not move its running statistics a second time (kernel.Pass.recomputing). So
// the recomputed values, and everything computed from them, are the
// first forward's bit for bit.

// shed forgets micro-batch mb's op outputs and stash, keeping its feeds.
func (e *Executor) shed(mb int) error {
	m := e.mbs[mb]
	m.vals, m.stash, m.shed = nil, nil, true
	return e.be.shed(mb, m.feeds)
}

// recompute reruns micro-batch m's forward from its feeds, leaving buffers
// alone, before its backward.
func (e *Executor) recompute(m *microBatch) error {
	e.ctx.Recomputing = true
	defer func() { e.ctx.Recomputing = false }()
	if _, err := e.run(m); err != nil {
		return err
	}
	m.shed = false
	return nil
}

// shed frees micro-batch mb's device memory but the copies of the values in
// keep and the staged outputs (which the stage is still sending on).
func (dev *devState) shed(mb int, keep map[*Value[float32]]bool) error {
	r := dev.mbs[mb]
	if r == nil {
		return nil
	}
	kept := map[uint64]bool{}
	for _, copies := range []map[*Value[float32]]cuda.Buffer{r.vals, r.ints} {
		for v, b := range copies {
			if keep[v] {
				kept[b.Ptr] = true
			} else {
				delete(copies, v)
			}
		}
	}
	var free []cuda.Buffer
	owned := r.owned[:0]
	for _, b := range r.owned {
		if kept[b.Ptr] {
			owned = append(owned, b)
		} else {
			free = append(free, b)
		}
	}
	r.owned = owned
	return kernel.OnDevice(dev.d, nil, func(s *kernel.Scope) {
		for _, b := range free {
			s.Fail(dev.d.Free(b))
		}
	})
}
