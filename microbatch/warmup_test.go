package microbatch

import (
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"testing"
)

// randomTiming gives every stage and edge of p a random duration; transfers
// are zero when free is set.
func randomTiming(r *rand.Rand, p Pipeline, free bool) Timing {
	t := Timing{}
	for s := 0; s < p.Stages; s++ {
		f := 0.5 + r.Float64()
		t.F = append(t.F, f)
		t.B = append(t.B, f*(1.5+r.Float64()))
		t.Static = append(t.Static, 100)
		t.Stash = append(t.Stash, int64(1+r.Intn(10)))
	}
	for range p.Edges {
		c := 0.0
		if !free {
			c = r.Float64() * 0.5
		}
		t.Act = append(t.Act, c)
		t.Grad = append(t.Grad, c*(0.5+r.Float64()))
	}
	return t
}

// warmVectors calls f with every warm-up vector a 1F1B schedule may take:
// from each stage's depth up to the number of micro-batches (or the depth,
// if more), never less than a successor's.
func warmVectors(p Pipeline, f func([]int)) {
	depth, _ := p.Depth()
	w := make([]int, p.Stages)
	var rec func(s int)
	rec = func(s int) {
		if s < 0 {
			f(append([]int(nil), w...))
			return
		}
		for v := depth[s]; v <= max(depth[s], p.MicroBatches); v++ {
			ok := true
			for _, e := range p.out(s) {
				ok = ok && v >= w[p.Edges[e][1]]
			}
			if ok {
				w[s] = v
				rec(s - 1)
			}
		}
	}
	rec(p.Stages - 1) // stages are numbered topologically: successors first
}

func iteration(t *testing.T, p Pipeline, tm Timing, warm []int) float64 {
	t.Helper()
	s, err := OneFOneBWarm(p, warm)
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(s, nil); err != nil {
		t.Fatalf("warm-up %v on %+v: %v", warm, p, err)
	}
	res, err := Simulate(s, tm)
	if err != nil {
		t.Fatal(err)
	}
	return res.Iteration
}

// TestWarmupBeatsDepth: on random stage DAGs with random durations,
// transfers and memory limits, the timed warm-up holds at most what memory
// allows (or the depth, where that is more) and is never slower than warming
// up to the depth; with free transfers it is the depth. It also reports how
// far it is from the best of every warm-up vector on small pipelines.
func TestWarmupBeatsDepth(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	worst, sum, n, faster := 0.0, 0.0, 0, 0
	for i := 0; i < 1500; i++ {
		p := randomPipeline(r)
		free := i%4 == 0
		tm := randomTiming(r, p, free)
		limit := int64(0)
		if i%3 == 0 {
			limit = 100 + int64(r.Intn(40))
		}
		warm, err := Warmup(p, tm, limit)
		if err != nil {
			t.Fatal(err)
		}
		depth, _ := p.Depth()
		for s := range warm {
			capped := limit > 0 && warm[s] > depth[s] && tm.Static[s]+int64(warm[s])*tm.Stash[s] > limit
			if capped || (free && warm[s] != depth[s]) {
				t.Fatalf("case %d: stage %d warms up %d (depth %d, limit %d, free %v) on %+v with %+v", i, s, warm[s], depth[s], limit, free, p, tm)
			}
		}
		got, base := iteration(t, p, tm, warm), iteration(t, p, tm, depth)
		if got > base*(1+1e-12) {
			t.Fatalf("case %d: warm-up %v takes %v, the depth %v takes %v, on %+v with %+v", i, warm, got, depth, base, p, tm)
		}
		if got < base*(1-1e-12) {
			faster++
		}
		if p.Stages <= 4 && limit == 0 && !free {
			best := got
			warmVectors(p, func(w []int) { best = min(best, iteration(t, p, tm, w)) })
			worst = max(worst, got/best-1)
			sum += got/best - 1
			n++
		}
	}
	if faster == 0 {
		t.Error("the timed warm-up was never faster than the depth")
	}
	t.Logf("faster than the depth in %d of 1500 cases; against the best warm-up vector over %d small cases: mean gap %.2f%%, worst %.2f%%",
		faster, n, 100*sum/float64(n), 100*worst)
}

// TestWarmupHidesTransfers: a chain of equal stages with a transfer on every
// edge runs at one stage's F + B per micro-batch with the timed warm-up, and
// stalls for more than a transfer per micro-batch with the depth's.
func TestWarmupHidesTransfers(t *testing.T) {
	const d, m, f, b, c = 6, 64, 1.0, 2.0, 0.1
	p := chain(d, m)
	tm := Timing{}
	for s := 0; s < d; s++ {
		tm.F, tm.B = append(tm.F, f), append(tm.B, b)
	}
	for range p.Edges {
		tm.Act, tm.Grad = append(tm.Act, c), append(tm.Grad, c)
	}
	period := func(warm []int) float64 {
		s, err := OneFOneBWarm(p, warm)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Simulate(s, tm)
		if err != nil {
			t.Fatal(err)
		}
		var starts []float64
		for _, e := range res.Events {
			if e.Stage == 0 && e.Kind == Backward {
				starts = append(starts, e.Start)
			}
		}
		return (starts[40] - starts[20]) / 20
	}
	warm, err := Warmup(p, tm, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{11, 9, 7, 5, 3, 1}; fmt.Sprint(warm) != fmt.Sprint(want) {
		t.Errorf("warm-up %v, want %v", warm, want)
	}
	depth, _ := p.Depth()
	if got := period(warm); math.Abs(got-(f+b)) > 1e-9 {
		t.Errorf("period with the timed warm-up %v, want %v", got, f+b)
	}
	if got := period(depth); got < f+b+c {
		t.Errorf("period with the depth's warm-up %v, want a stall of more than one transfer over %v", got, f+b)
	}
}

// TestOneFOneBWarmFromIsOneFOneBWarm: building a schedule from a base (the
// lists of the stages whose counts did not change kept) gives the schedule
// built afresh, on random pipelines and counts.
func TestOneFOneBWarmFromIsOneFOneBWarm(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	for i := 0; i < 300; i++ {
		p := randomPipeline(r)
		depth, _ := p.Depth()
		base := append([]int(nil), depth...)
		bs, err := OneFOneBWarm(p, base)
		if err != nil {
			t.Fatal(err)
		}
		warm := append([]int(nil), base...)
		for s := range warm { // raise a few, keeping every stage ahead of those after it
			if r.Intn(3) == 0 {
				warm[s] += r.Intn(4)
			}
		}
		for changed := true; changed; {
			changed = false
			for _, e := range p.Edges {
				if warm[e[0]] < warm[e[1]]+1 {
					warm[e[0]], changed = warm[e[1]]+1, true
				}
			}
		}
		want, err := OneFOneBWarm(p, warm)
		if err != nil {
			t.Fatal(err)
		}
		got, err := OneFOneBWarmFrom(bs, base, warm)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("pipeline %+v, counts %v from %v: lists differ", p, warm, base)
		}
	}
	if _, err := OneFOneBWarmFrom(&Schedule{Pipe: Pipeline{Stages: 2, MicroBatches: 2}}, []int{1, 1}, []int{1, 1}); err == nil {
		t.Error("a base without lists: no error")
	}
}
