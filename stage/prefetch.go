package stage

import (
	"maps"
	"sync"
)

// Prefetcher is a Source that makes the next step's batch while the
// current one trains: after handing out (step, n, names) it starts making
// (step+1, n, names) from its source in the background, and hands that out
// if it is what is asked for next. A batch is a function of the step alone
// (Source's contract), so a batch made early is the batch made on time;
// anything else asked for is made then, after the background work ends,
// so the source is never called from two goroutines at once. Where a
// step's compute runs on a GPU the host is idle meanwhile, and the batch
// (ResNet-50's synthetic images at batch 64: 9.6 M values) leaves the
// step's critical path; a pipeline's CPU worker makes it while it waits on
// its peers. runtime.Worker wraps the synthetic Dataset in one on every
// backend, Trainer on a device only (on the CPU backend the cores are the
// step's); a user's dataset (runtime.DataSource) reads ahead on its own.
type Prefetcher struct {
	src Source
	// Until, where positive, is the first step not made ahead: the run's
	// length, so that no batch is made after the last.
	Until int
	mu    sync.Mutex
	next  *fetch // the batch being made, or made, in the background
}

// fetch is one batch made in the background: done is waited for before
// out and err are read.
type fetch struct {
	step, n int
	names   map[string]bool
	done    sync.WaitGroup
	out     map[string]*Value[float32]
	err     error
}

// NewPrefetcher wraps src.
func NewPrefetcher(src Source) *Prefetcher { return &Prefetcher{src: src} }

// Source is the wrapped source.
func (p *Prefetcher) Source() Source { return p.src }

// Inputs is src's batch, the one made in the background where it is the
// one asked for; it then starts the next step's.
func (p *Prefetcher) Inputs(step, n int, names map[string]bool) (map[string]*Value[float32], error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out map[string]*Value[float32]
	var err error
	if f := p.next; f != nil {
		f.done.Wait()
		p.next = nil
		if f.step == step && f.n == n && (f.names == nil) == (names == nil) && maps.Equal(f.names, names) { // nil: all inputs; empty: none
			out, err = f.out, f.err
		} else {
			out, err = p.src.Inputs(step, n, names)
		}
	} else {
		out, err = p.src.Inputs(step, n, names)
	}
	if err != nil || p.Until > 0 && step+1 >= p.Until {
		return out, err
	}
	f := &fetch{step: step + 1, n: n, names: maps.Clone(names)}
	f.done.Add(1)
	p.next = f
	go func() {
		defer f.done.Done()
		f.out, f.err = p.src.Inputs(f.step, f.n, f.names)
	}()
	return out, nil
}

// Wait waits for the background batch, if one is being made: before the
// source is used otherwise, or dropped.
func (p *Prefetcher) Wait() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next != nil {
		p.next.done.Wait()
	}
}
