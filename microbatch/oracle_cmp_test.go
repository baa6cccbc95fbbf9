package microbatch

import (
	"fmt"
	"math/rand"
	"reflect"
	"testing"
	"time"
)

// splitTiming gives tm a W: each backward split 30-70% into B and W.
func splitTiming(r *rand.Rand, tm Timing) Timing {
	tm.W = nil
	for s := range tm.B {
		frac := 0.3 + 0.4*r.Float64()
		tm.W = append(tm.W, tm.B[s]*(1-frac))
		tm.B[s] *= frac
	}
	return tm
}

// randomSchedules is every schedule kind on p and tm: GPipe, 1F1B by depth
// and by Warmup, zero bubble, and one of them with two actions of a stage
// swapped (which may deadlock).
func randomSchedules(t *testing.T, r *rand.Rand, p Pipeline, tm Timing) []*Schedule {
	t.Helper()
	var out []*Schedule
	for _, name := range []string{"gpipe", "1f1b", "1f1b-depth", "zb"} {
		s, err := NewTimed(name, p, tm, 0)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	bent := *out[r.Intn(len(out))]
	bent.Lists = append([][]Action(nil), bent.Lists...)
	st := r.Intn(p.Stages)
	l := append([]Action(nil), bent.Lists[st]...)
	i, j := r.Intn(len(l)), r.Intn(len(l))
	l[i], l[j] = l[j], l[i]
	bent.Lists[st] = l
	return append(out, &bent)
}

// TestCursorReproducesOldSimulator: on random stage DAGs, timings and
// schedules (deadlocking ones among them), Simulate and Summarize, which
// drive the cursor, give exactly the old interpreter's result (bit for bit,
// every event) or its error.
func TestCursorReproducesOldSimulator(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	deadlocks := 0
	for i := 0; i < 400; i++ {
		p := randomPipeline(r)
		tm := splitTiming(r, randomTiming(r, p, i%5 == 0))
		tm.Flush = make([]float64, p.Stages)
		for s := range tm.Flush {
			tm.Flush[s] = r.Float64()
		}
		if i%2 == 0 {
			tm.Devices = make([]int, p.Stages)
			for s := range tm.Devices {
				tm.Devices[s] = 1 + r.Intn(4)
			}
		}
		for k, s := range randomSchedules(t, r, p, tm) {
			for _, events := range []bool{true, false} {
				want, werr := oldSimulate(s, tm, events)
				got, gerr := Simulate(s, tm)
				if !events {
					got, gerr = Summarize(s, tm)
				}
				if fmt.Sprint(werr) != fmt.Sprint(gerr) {
					t.Fatalf("case %d schedule %d (%s): error %v, the old simulator's %v", i, k, s.Name, gerr, werr)
				}
				if werr != nil {
					deadlocks++
					continue
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("case %d schedule %d (%s, events %v): %+v, the old simulator's %+v", i, k, s.Name, events, got, want)
				}
			}
		}
	}
	if deadlocks == 0 {
		t.Error("no deadlocking schedule was tried")
	}
}

// TestCursorReproducesOldZeroBubble: on random stage DAGs and timings, with
// Warmup's counts and random larger ones, ZeroBubble (which drives the
// cursor) makes exactly the old playout's lists.
func TestCursorReproducesOldZeroBubble(t *testing.T) {
	r := rand.New(rand.NewSource(13))
	for i := 0; i < 400; i++ {
		p := randomPipeline(r)
		tm := splitTiming(r, randomTiming(r, p, i%4 == 0))
		warm, err := Warmup(p, tm, 0)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 { // raise some stages, keeping each ahead of its successors
			for s := p.Stages - 1; s >= 0; s-- {
				warm[s] += r.Intn(3)
				for _, e := range p.out(s) {
					warm[s] = max(warm[s], warm[p.Edges[e][1]]+1)
				}
			}
		}
		want, werr := oldZeroBubble(p, tm, warm)
		got, gerr := ZeroBubble(p, tm, warm)
		if fmt.Sprint(werr) != fmt.Sprint(gerr) {
			t.Fatalf("case %d: error %v, the old playout's %v", i, gerr, werr)
		}
		if werr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d on %+v warm %v: lists\n%v\nthe old playout's\n%v", i, p, warm, got.Lists, want.Lists)
		}
	}
}

// benchPipelines are the simulator benchmark's inputs: a 32-stage chain and
// a 24-stage random DAG, 256 micro-batches each, on 1F1B with Warmup's
// counts and on zero bubble.
func benchPipelines(b *testing.B) []struct {
	name string
	s    *Schedule
	t    Timing
} {
	r := rand.New(rand.NewSource(1))
	dag := Pipeline{Stages: 24, MicroBatches: 256}
	for v := 1; v < dag.Stages; v++ {
		for u := max(0, v-3); u < v; u++ {
			if u == v-1 || r.Intn(3) == 0 {
				dag.Edges = append(dag.Edges, [2]int{u, v})
			}
		}
	}
	var out []struct {
		name string
		s    *Schedule
		t    Timing
	}
	for _, p := range []struct {
		name string
		p    Pipeline
	}{{"chain32", chain(32, 256)}, {"dag24", dag}} {
		tm := splitTiming(r, randomTiming(r, p.p, false))
		for _, sched := range []string{"1f1b", "zb"} {
			s, err := NewTimed(sched, p.p, tm, 0)
			if err != nil {
				b.Fatal(err)
			}
			out = append(out, struct {
				name string
				s    *Schedule
				t    Timing
			}{p.name + "/" + sched, s, tm})
		}
	}
	return out
}

// BenchmarkSimulate times Summarize (what the planner's warm-up tuning runs
// per candidate) through the cursor beside the old interpreter (the
// baseline), alternating the two call by call so that both see the same
// load on a shared machine: it reports each one's time per call and
// cursor/old, their ratio.
func BenchmarkSimulate(b *testing.B) {
	for _, c := range benchPipelines(b) {
		b.Run(c.name, func(b *testing.B) {
			paired(b, func() error {
				_, err := oldSimulate(c.s, c.t, false)
				return err
			}, func() error {
				_, err := Summarize(c.s, c.t)
				return err
			})
		})
	}
}

// paired runs old and cur alternately b.N times each and reports their
// times per call and cur's over old's.
func paired(b *testing.B, old, cur func() error) {
	var tOld, tCur time.Duration
	for i := 0; i < b.N; i++ {
		for k, f := range []func() error{old, cur} {
			if i%2 == 1 { // alternate which goes first
				f = [2]func() error{cur, old}[k]
			}
			start := time.Now()
			if err := f(); err != nil {
				b.Fatal(err)
			}
			if d := time.Since(start); (i%2 == 0) == (k == 0) {
				tOld += d
			} else {
				tCur += d
			}
		}
	}
	b.ReportMetric(float64(tOld.Nanoseconds())/float64(b.N), "old-ns/call")
	b.ReportMetric(float64(tCur.Nanoseconds())/float64(b.N), "cursor-ns/call")
	b.ReportMetric(float64(tCur)/float64(tOld), "cursor/old")
}
