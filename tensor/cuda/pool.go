package cuda

import "fmt"

// allocator is what a Pool caches: device memory (cuMemAlloc) or pinned
// host memory (cuMemHostAlloc). Tests give it a fake.
type allocator[P comparable] interface {
	alloc(bytes uint64) (P, error)
	free(p P) error
}

// Pool is a caching allocator: freed blocks wait on a free list of their
// size class and are handed out again before the allocator is asked for
// more. When the allocator fails, the pool frees every cached block and
// tries once more.
type Pool[P comparable] struct {
	a     allocator[P]
	free  map[uint64][]P // by size class
	live  map[P]uint64   // block -> its size class
	Stats PoolStats
}

// PoolStats counts a pool's bytes and calls.
type PoolStats struct {
	InUse, Cached, Peak uint64 // bytes
	Allocs, Reuses      int    // allocator calls, blocks handed out again
}

func newPool[P comparable](a allocator[P]) *Pool[P] {
	return &Pool[P]{a: a, free: map[uint64][]P{}, live: map[P]uint64{}}
}

// sizeClass rounds a request up: to 512 bytes up to 1 MiB, to 2 MiB above,
// so a block serves requests of nearly its size and little is wasted.
func sizeClass(n uint64) uint64 {
	const small, large = 512, 2 << 20
	if n == 0 {
		n = 1
	}
	if n <= 1<<20 {
		return (n + small - 1) / small * small
	}
	return (n + large - 1) / large * large
}

// Get returns a block of at least n bytes.
func (p *Pool[P]) Get(n uint64) (P, error) {
	c := sizeClass(n)
	if l := p.free[c]; len(l) > 0 {
		b := l[len(l)-1]
		p.free[c] = l[:len(l)-1]
		p.Stats.Cached -= c
		p.Stats.Reuses++
		return b, p.use(b, c)
	}
	b, err := p.a.alloc(c)
	if err != nil {
		if p.Stats.Cached == 0 {
			return b, p.failed(c, err)
		}
		if terr := p.Trim(); terr != nil {
			return b, terr
		}
		if b, err = p.a.alloc(c); err != nil {
			return b, p.failed(c, err)
		}
	}
	p.Stats.Allocs++
	return b, p.use(b, c)
}

// failed says how much was asked for and held when the allocator refused:
// out of memory, the first question is whose memory.
func (p *Pool[P]) failed(c uint64, err error) error {
	return fmt.Errorf("allocating %s with %s in use (peak %s): %w", bytesText(c), bytesText(p.Stats.InUse), bytesText(p.Stats.Peak), err)
}

// bytesText is n in bytes, KiB, MiB or GiB.
func bytesText(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func (p *Pool[P]) use(b P, c uint64) error {
	if _, dup := p.live[b]; dup {
		return fmt.Errorf("cuda: pool: block handed out twice")
	}
	p.live[b] = c
	p.Stats.InUse += c
	p.Stats.Peak = max(p.Stats.Peak, p.Stats.InUse)
	return nil
}

// Put returns a block to its free list.
func (p *Pool[P]) Put(b P) error {
	c, err := p.unuse(b, "returned")
	if err != nil {
		return err
	}
	p.Stats.Cached += c
	p.free[c] = append(p.free[c], b)
	return nil
}

// Discard gives block b, in use, straight back to the allocator: a large
// block used once (cuDNN's algorithm search's workspace), which the pool
// would otherwise keep.
func (p *Pool[P]) Discard(b P) error {
	if _, err := p.unuse(b, "discarded"); err != nil {
		return err
	}
	return p.a.free(b)
}

// unuse takes block b out of use, returning its size class; how says what
// was done with it, for the error where it was not in use.
func (p *Pool[P]) unuse(b P, how string) (uint64, error) {
	c, ok := p.live[b]
	if !ok {
		return 0, fmt.Errorf("cuda: pool: a block that is not in use was %s", how)
	}
	delete(p.live, b)
	p.Stats.InUse -= c
	return c, nil
}

// Trim gives every cached block back to the allocator.
func (p *Pool[P]) Trim() error {
	for c, l := range p.free {
		for _, b := range l {
			if err := p.a.free(b); err != nil {
				return err
			}
			p.Stats.Cached -= c
		}
		delete(p.free, c)
	}
	return nil
}

// Release frees every block, cached or in use (at Close).
func (p *Pool[P]) Release() error {
	for b := range p.live {
		if err := p.Put(b); err != nil {
			return err
		}
	}
	return p.Trim()
}
