package stage

import (
	"github.com/graphpipe/graphpipe/stage/internal/kernel"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// On a device, an overlapped all-reduce's buckets come to the host through
// the all-reduce's pinned staging, where EndStep's all-reduce would have
// brought every gradient at once: each bucket's pieces are queued down
// behind the kernels of the ops that made them, an event after them; one
// goroutine a pass waits for the events in order (the device's WaitFree,
// so the pass queues its next kernels meanwhile) and tells each bucket's
// waiter. The sums go back up piece by piece in EndStep (upSums).

// eventWait is a bucket's event and whom to tell once it has passed.
type eventWait struct {
	ev   cuda.Event
	done chan error
}

// overlapGrads makes the staging and starts the pass's event waiter.
func (b *cudaBackend) overlapGrads(n int) ([]*Value[float32], error) {
	var out []*Value[float32]
	err := b.run(func(s *kernel.Scope, t *devTrain) {
		if t.pl.total > 0 && t.staging(s) {
			out = t.stagedViews(b.e.Params)
		}
	})
	if err != nil {
		return nil, err
	}
	waits := make(chan eventWait, n)
	b.waits = waits
	go func() {
		for w := range waits {
			w.done <- b.d.WaitFree(w.ev)
		}
	}()
	return out, nil
}

// bucketReady queues the spans' pieces down into the staging and an event
// after them.
func (b *cudaBackend) bucketReady(spans [][2]int64) (func() error, error) {
	var ev cuda.Event
	err := b.run(func(s *kernel.Scope, t *devTrain) {
		for _, sp := range spans {
			for _, u := range spanPieces(t.pl.n, int(sp[0]), int(sp[1])) {
				t.downPiece(s, t.g, u)
			}
		}
		if s.Err() == nil {
			var err error
			ev, err = t.d.Record()
			s.Fail(err)
		}
	})
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	b.waits <- eventWait{ev, done}
	return func() error { return <-done }, nil
}

// bucketsQueued ends the pass's waiter once it has waited for every event.
func (b *cudaBackend) bucketsQueued() {
	if b.waits != nil {
		close(b.waits)
		b.waits = nil
	}
}

// overlapViews are the staging's views of the gradients whose buckets
// came down during the pass: what the buckets' rings summed (nil: no
// parameters).
func (t *devTrain) overlapViews() []*Value[float32] {
	if t.pl.total == 0 {
		return nil
	}
	return t.stagedViews(t.e.Params)
}
