package stage

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingSource is a Source whose batch is its step and n, that records
// every call, fails for the steps in bad, and fails the test where two
// calls overlap.
type countingSource struct {
	t      *testing.T
	mu     sync.Mutex
	calls  []string
	inside atomic.Int32
	bad    map[int]bool
}

func (c *countingSource) Inputs(step, n int, names map[string]bool) (map[string]*Value[float32], error) {
	if c.inside.Add(1) > 1 {
		c.t.Errorf("step %d: the source was called while another call ran", step)
	}
	defer c.inside.Add(-1)
	time.Sleep(time.Millisecond) // long enough for an overlap to show
	c.mu.Lock()
	c.calls = append(c.calls, fmt.Sprintf("%d/%d/%d", step, n, len(names)))
	c.mu.Unlock()
	if c.bad[step] {
		return nil, fmt.Errorf("step %d: no such batch", step)
	}
	return map[string]*Value[float32]{"x": {Shape: []int{1}, Data: []float32{float32(step*1000 + n)}}}, nil
}

func (c *countingSource) log() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.calls...)
}

// TestPrefetcher: every batch handed out is the source's for the step
// asked (in order, out of order, with other sizes and names); the next
// step's is made in the background and not made again; the source is
// never called from two goroutines at once; a failed background batch is
// an error only for the step it belongs to.
func TestPrefetcher(t *testing.T) {
	src := &countingSource{t: t, bad: map[int]bool{4: true}}
	p := NewPrefetcher(src)
	ask := []struct {
		step, n int
		names   map[string]bool
	}{
		{0, 8, nil}, {1, 8, nil}, {2, 8, nil}, // in order: each made in the background
		{7, 8, nil},                        // a jump: made on demand
		{8, 4, nil},                        // another size: made on demand
		{9, 4, map[string]bool{"x": true}}, // other names: made on demand
		{3, 8, nil},                        // back: made on demand (step 4's background batch fails, unasked)
	}
	for _, a := range ask {
		got, err := p.Inputs(a.step, a.n, a.names)
		if err != nil {
			t.Fatalf("step %d: %v", a.step, err)
		}
		if v := got["x"].Data[0]; v != float32(a.step*1000+a.n) {
			t.Fatalf("step %d of %d: batch %v", a.step, a.n, v)
		}
	}
	if _, err := p.Inputs(4, 8, nil); err == nil {
		t.Fatal("step 4, which the source cannot make: no error")
	}
	p.Wait()
	want := []string{"0/8/0", "1/8/0", "2/8/0", "3/8/0", "7/8/0", "8/8/0", "8/4/0", "9/4/0", "9/4/1", "10/4/1", "3/8/0", "4/8/0"}
	if got := src.log(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the source's calls:\n got %v\nwant %v", got, want)
	}
	if p.Source() != Source(src) {
		t.Error("Source is not the wrapped source")
	}
}

// TestPrefetcherNamesAndUntil: a batch made ahead for all inputs (names
// nil) is not handed out for none (an empty set), and Until stops the
// making ahead at the run's length.
func TestPrefetcherNamesAndUntil(t *testing.T) {
	src := &countingSource{t: t}
	p := NewPrefetcher(src)
	p.Until = 3
	for step, names := range []map[string]bool{nil, {}, {}} {
		if _, err := p.Inputs(step, 8, names); err != nil {
			t.Fatal(err)
		}
	}
	p.Wait()
	// step 0 of all inputs (step 1 of all made ahead), step 1 of none made
	// on demand (step 2 of none ahead), step 2 handed out (step 3 is Until)
	calls := src.log()
	if fmt.Sprint(calls) != "[0/8/0 1/8/0 1/8/0 2/8/0]" {
		t.Fatalf("calls %v: the all-inputs batch of step 1 was not made again for an empty set", calls)
	}
	q := NewPrefetcher(&countingSource{t: t})
	q.Until = 2
	for step := 0; step < 2; step++ {
		if _, err := q.Inputs(step, 4, nil); err != nil {
			t.Fatal(err)
		}
	}
	q.Wait()
	if got := q.Source().(*countingSource).log(); fmt.Sprint(got) != "[0/4/0 1/4/0]" {
		t.Errorf("with Until 2, the source made %v; want steps 0 and 1 alone", got)
	}
}
