package cuda

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// fakeAlloc hands out numbered blocks and fails past a byte limit.
type fakeAlloc struct {
	next, used, limit uint64
	size              map[uint64]uint64
	calls             int
}

func (f *fakeAlloc) alloc(n uint64) (uint64, error) {
	f.calls++
	if f.used+n > f.limit {
		return 0, errors.New("out of memory")
	}
	f.next++
	f.used += n
	f.size[f.next] = n
	return f.next, nil
}

func (f *fakeAlloc) free(p uint64) error {
	n, ok := f.size[p]
	if !ok {
		return errors.New("double free")
	}
	delete(f.size, p)
	f.used -= n
	return nil
}

func TestSizeClass(t *testing.T) {
	for _, tc := range []struct{ in, want uint64 }{{0, 512}, {1, 512}, {512, 512}, {513, 1024}, {1 << 20, 1 << 20}, {1<<20 + 1, 2 << 20}, {5 << 20, 6 << 20}} {
		if got := sizeClass(tc.in); got != tc.want {
			t.Errorf("sizeClass(%d) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestPoolReusesAndTrims(t *testing.T) {
	f := &fakeAlloc{limit: 4 << 20, size: map[uint64]uint64{}}
	p := newPool[uint64](f)
	a, _ := p.Get(1000)
	if err := p.Put(a); err != nil {
		t.Fatal(err)
	}
	b, _ := p.Get(900) // same class (1024): the same block again
	if a != b || p.Stats.Reuses != 1 || f.calls != 1 {
		t.Fatalf("got block %d after %d, reuses %d, allocator calls %d", b, a, p.Stats.Reuses, f.calls)
	}
	if err := p.Put(b); err != nil {
		t.Fatal(err)
	}
	if err := p.Put(b); err == nil {
		t.Fatal("a block returned twice was accepted")
	}
	// 3 MiB cached in 2 MiB blocks' classes; a 4 MiB request must trim them
	c, _ := p.Get(3 << 20)
	_ = p.Put(c)
	if _, err := p.Get(4 << 20); err != nil {
		t.Fatalf("the pool did not trim its cache before failing: %v", err)
	}
	_, err := p.Get(1)
	if err == nil {
		t.Fatal("allocation past the limit succeeded")
	}
	// the failure says what was asked and held, and keeps the cause
	if want := "allocating 512 B with 4.00 MiB in use (peak 4.00 MiB): out of memory"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

// TestPoolAccounting: random gets and puts keep InUse and Cached equal to
// the sums over blocks, and Release hands everything back.
func TestPoolAccounting(t *testing.T) {
	f := &fakeAlloc{limit: 1 << 40, size: map[uint64]uint64{}}
	p := newPool[uint64](f)
	r := rand.New(rand.NewPCG(1, 2))
	var held []uint64
	for i := 0; i < 5000; i++ {
		if len(held) > 0 && r.IntN(2) == 0 {
			k := r.IntN(len(held))
			if err := p.Put(held[k]); err != nil {
				t.Fatal(err)
			}
			held = append(held[:k], held[k+1:]...)
		} else {
			b, err := p.Get(uint64(1 + r.IntN(3<<20)))
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, b)
		}
		var inUse uint64
		for _, b := range held {
			inUse += p.live[b]
		}
		if inUse != p.Stats.InUse || f.used != p.Stats.InUse+p.Stats.Cached {
			t.Fatalf("step %d: in use %d (blocks say %d), cached %d, allocator holds %d", i, p.Stats.InUse, inUse, p.Stats.Cached, f.used)
		}
	}
	if err := p.Release(); err != nil || f.used != 0 || len(f.size) != 0 {
		t.Fatalf("release: %v, %d bytes still allocated", err, f.used)
	}
}

// TestPoolDiscard: a discarded block goes back to the allocator at once,
// uncached; one not in use is refused.
func TestPoolDiscard(t *testing.T) {
	f := &fakeAlloc{limit: 4 << 20, size: map[uint64]uint64{}}
	p := newPool[uint64](f)
	a, err := p.Get(3 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Discard(a); err != nil {
		t.Fatal(err)
	}
	if f.used != 0 || p.Stats.InUse != 0 || p.Stats.Cached != 0 {
		t.Fatalf("after Discard: allocator holds %d bytes, pool in use %d, cached %d", f.used, p.Stats.InUse, p.Stats.Cached)
	}
	if err := p.Discard(a); err == nil {
		t.Fatal("a block discarded twice was accepted")
	}
}
