package microbatch

import (
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestCursorSteps drives one stage's cursor by hand: the spans each step
// returns, the clock, busy time, stash counts and the flush.
func TestCursorSteps(t *testing.T) {
	tm := func(f, b, w, act, grad, flush float64) Timing {
		return Timing{F: []float64{f, f}, B: []float64{b, b}, W: []float64{w, w}, Act: []float64{act}, Grad: []float64{grad}, Flush: []float64{flush, flush}}
	}
	type step struct {
		act        string
		land       float64 // a Recv's
		start, end float64
	}
	cases := []struct {
		name       string
		stage      int
		split      bool
		t          Timing
		steps      []step
		busy       float64
		held, peak int
		flushEnd   float64
	}{
		{"a first stage's 1F1B", 0, false, tm(1, 2, 0, 0.5, 0.25, 0.3), []step{
			{"0F", 0, 0, 1}, {"0Sa@e0", 0, 1, 1.5}, {"1F", 0, 1, 2}, {"1Sa@e0", 0, 2, 2.5},
			{"0Rg@e0", 4, 2, 4}, {"0B", 0, 4, 6}, {"1Rg@e0", 5, 6, 6}, {"1B", 0, 6, 8},
		}, 6, 0, 2, 8.3},
		{"a link busier than its stage queues the sends", 0, false, tm(0.25, 1, 0, 1, 1, 0), []step{
			{"0F", 0, 0, 0.25}, {"0Sa@e0", 0, 0.25, 1.25}, {"1F", 0, 0.25, 0.5}, {"1Sa@e0", 0, 1.25, 2.25},
			{"2F", 0, 0.5, 0.75}, {"2Sa@e0", 0, 2.25, 3.25},
		}, 0.75, 3, 3, 0.75},
		{"a sink waits for data, and a Recv already landed costs nothing", 1, false, tm(1, 1, 0, 0.5, 0.5, 0), []step{
			{"0Ra@e0", 1.5, 0, 1.5}, {"0F", 0, 1.5, 2.5}, {"1Ra@e0", 2, 2.5, 2.5}, {"1F", 0, 2.5, 3.5},
			{"0B", 0, 3.5, 4.5}, {"0Sg@e0", 0, 4.5, 5},
		}, 3, 1, 2, 4.5},
		{"split: B keeps the stash, W frees it", 1, true, tm(1, 1, 0.5, 0, 0, 0.25), []step{
			{"0Ra@e0", 0, 0, 0}, {"0F", 0, 0, 1}, {"0B", 0, 1, 2}, {"0Sg@e0", 0, 2, 2},
			{"1Ra@e0", 0, 2, 2}, {"1F", 0, 2, 3}, {"0W", 0, 3, 3.5}, {"1B", 0, 3.5, 4.5},
		}, 4.5, 1, 2, 4.75},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var list []Action
			for _, st := range tc.steps {
				a, err := ParseAction(st.act)
				if err != nil {
					t.Fatal(err)
				}
				list = append(list, a)
			}
			lists := make([][]Action, 2)
			lists[tc.stage] = list
			c, err := NewCursor(&Schedule{Pipe: chain(2, 3), Split: tc.split, Lists: lists}, tc.stage, tc.t)
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range tc.steps {
				a, ok := c.Next()
				if !ok || a != list[i] {
					t.Fatalf("step %d: Next is %v, %v; want %v", i, a, ok, list[i])
				}
				start, end := c.Step(st.land)
				if start != st.start || end != st.end {
					t.Errorf("step %d (%s): span [%v, %v), want [%v, %v)", i, st.act, start, end, st.start, st.end)
				}
			}
			if a, ok := c.Next(); ok {
				t.Fatalf("Next after the list: %v", a)
			}
			if c.Busy() != tc.busy || c.Held() != tc.held || c.InFlight() != tc.peak {
				t.Errorf("busy %v, held %d, in flight %d; want %v, %d, %d", c.Busy(), c.Held(), c.InFlight(), tc.busy, tc.held, tc.peak)
			}
			if start, end := c.Finish(); start != c.Clock()-tc.t.Flush[tc.stage] || end != tc.flushEnd || c.Clock() != end {
				t.Errorf("flush [%v, %v), clock %v; want the flush to end at %v", start, end, c.Clock(), tc.flushEnd)
			}
		})
	}
}

// TestCursorDo: a builder's cursor appends and steps at once, and its list
// is what it did.
func TestCursorDo(t *testing.T) {
	p := chain(2, 1)
	c, err := NewCursor(&Schedule{Pipe: p, Lists: make([][]Action, 2)}, 0, Unit(p))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Next(); ok {
		t.Fatal("an empty list has a next action")
	}
	want := []Action{{Kind: Forward}, {Kind: Send, Dir: Act}}
	for i, tc := range []struct{ start, end float64 }{{0, 1}, {1, 1}} {
		if start, end := c.Do(want[i], 0); start != tc.start || end != tc.end {
			t.Errorf("%v: span [%v, %v), want [%v, %v)", want[i], start, end, tc.start, tc.end)
		}
		if a, ok := c.Next(); ok {
			t.Fatalf("Next after Do is %v", a)
		}
	}
	if got := c.List(); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("list %v, want %v", got, want)
	}
	if c.Clock() != 1 {
		t.Errorf("clock %v, want 1", c.Clock())
	}
}

// TestNewCursorChecksTiming: a timing that does not fit the schedule is an
// error naming the field.
func TestNewCursorChecksTiming(t *testing.T) {
	p := chain(2, 1)
	tm := Unit(p)
	tm.Act = nil
	_, err := NewCursor(&Schedule{Pipe: p, Lists: make([][]Action, 2)}, 0, tm)
	if err == nil || !strings.Contains(err.Error(), "Act") {
		t.Fatalf("error %v, want one naming Act", err)
	}
}

// TestLinkCarry: a link carries one transfer at a time, in order.
func TestLinkCarry(t *testing.T) {
	var l Link
	for i, tc := range []struct{ ready, dur, start, end float64 }{
		{0, 1, 0, 1}, {0.5, 1, 1, 2}, {5, 0.5, 5, 5.5}, {5, 0, 5.5, 5.5},
	} {
		if s, e := l.Carry(tc.ready, tc.dur); s != tc.start || e != tc.end {
			t.Errorf("transfer %d: [%v, %v), want [%v, %v)", i, s, e, tc.start, tc.end)
		}
	}
}

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
