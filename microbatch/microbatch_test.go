package microbatch

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\n%s\nwant:\n%s", path, got, want)
	}
}

func chain(n, m int) Pipeline {
	p := Pipeline{Stages: n, MicroBatches: m}
	for s := 0; s+1 < n; s++ {
		p.Edges = append(p.Edges, [2]int{s, s + 1})
	}
	return p
}

// twoBranch is stages 0 and 1 side by side, joining at 2.
func twoBranch(m int) Pipeline {
	return Pipeline{Stages: 3, Edges: [][2]int{{0, 2}, {1, 2}}, MicroBatches: m}
}

func mustSchedule(t *testing.T, name string, p Pipeline) *Schedule {
	t.Helper()
	s, err := New(name, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(s, nil); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestGrids(t *testing.T) {
	cases := []struct {
		name, sched string
		p           Pipeline
	}{
		{"1f1b-chain4-m6", "1f1b", chain(4, 6)},
		{"gpipe-chain3-m4", "gpipe", chain(3, 4)},
		{"1f1b-two-branch-m4", "1f1b", twoBranch(4)},
		{"1f1b-chain4-m2", "1f1b", chain(4, 2)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Grid(mustSchedule(t, tc.sched, tc.p))
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, g)
		})
	}
}

type span struct {
	ev         string
	start, end float64
}

// timeline lists each stage's compute events as "F0 0-1".
func timeline(r *Result, stages int) [][]span {
	out := make([][]span, stages)
	for _, e := range r.Events {
		if e.Compute() {
			out[e.Stage] = append(out[e.Stage], span{fmt.Sprintf("%c%d", e.Kind, e.MB), e.Start, e.End})
		}
	}
	return out
}

func sameTimeline(t *testing.T, got, want [][]span) {
	t.Helper()
	for s := range want {
		if len(got[s]) != len(want[s]) {
			t.Fatalf("stage %d: %v, want %v", s, got[s], want[s])
		}
		for i := range want[s] {
			g, w := got[s][i], want[s][i]
			if g.ev != w.ev || math.Abs(g.start-w.start) > 1e-9 || math.Abs(g.end-w.end) > 1e-9 {
				t.Fatalf("stage %d event %d: %v, want %v", s, i, g, w)
			}
		}
	}
}

// TestSimulateChainByHand: 2 stages, 2 micro-batches, 1F1B, F=1, B=2,
// transfers 0.5. Worked out on paper:
//
//	s0: F0 0–1, F1 1–2; grad0 arrives 4.5+0.5=5: B0 5–7; grad1 at 8: B1 8–10
//	s1: act0 at 1.5: F0 1.5–2.5, B0 2.5–4.5; act1 at 2.5: F1 4.5–5.5, B1 5.5–7.5
func TestSimulateChainByHand(t *testing.T) {
	s := mustSchedule(t, "1f1b", chain(2, 2))
	r, err := Simulate(s, Timing{F: []float64{1, 1}, B: []float64{2, 2}, Act: []float64{0.5}, Grad: []float64{0.5}})
	if err != nil {
		t.Fatal(err)
	}
	sameTimeline(t, timeline(r, 2), [][]span{
		{{"F0", 0, 1}, {"F1", 1, 2}, {"B0", 5, 7}, {"B1", 8, 10}},
		{{"F0", 1.5, 2.5}, {"B0", 2.5, 4.5}, {"F1", 4.5, 5.5}, {"B1", 5.5, 7.5}},
	})
	if r.Iteration != 10 || math.Abs(r.Bubble-0.4) > 1e-12 || r.Busy[0] != 6 || r.InFlight[0] != 2 || r.InFlight[1] != 1 {
		t.Errorf("iteration %v bubble %v busy %v in flight %v", r.Iteration, r.Bubble, r.Busy, r.InFlight)
	}
}

// TestSimulateMessageCostsByHand: the chain of TestSimulateChainByHand
// with a message costing its sender 0.1 (Post) and its receiver 0.3
// (Take), and 1 per iteration (Fixed). Worked out on paper:
//
//	s0: F0 0–1, act0 lands 1.5, busy to 1.1; F1 1.1–2.1, act1 lands 2.6
//	    (its link free at 1.5), busy to 2.2; grad0 lands 5: B0 5–7;
//	    grad1 lands 8.4: B1 8.4–10.4
//	s1: act0 at 1.5: F0 1.5–2.5, B0 2.5–4.5, grad0 sent (busy to 4.6);
//	    act1 landed at 2.6 but taking it ends at 4.6+0.3: F1 4.9–5.9,
//	    B1 5.9–7.9, grad1 sent, lands 8.4
//
// and the iteration 10.4 + 1. With stage 1 beginning at 3, it takes act0
// at 3.3, sends grad0 at 6.3 (landing 6.8), takes act1 at 6.4+0.3, and
// grad1 lands at 10.2. A hold of 0.25 delays act0 alone, the one message
// whose sender computes next.
func TestSimulateMessageCostsByHand(t *testing.T) {
	s := mustSchedule(t, "1f1b", chain(2, 2))
	r, err := Simulate(s, Timing{F: []float64{1, 1}, B: []float64{2, 2}, Act: []float64{0.5}, Grad: []float64{0.5},
		Post: []float64{0.1}, Take: []float64{0.3}, Fixed: 1})
	if err != nil {
		t.Fatal(err)
	}
	sameTimeline(t, timeline(r, 2), [][]span{
		{{"F0", 0, 1}, {"F1", 1.1, 2.1}, {"B0", 5, 7}, {"B1", 8.4, 10.4}},
		{{"F0", 1.5, 2.5}, {"B0", 2.5, 4.5}, {"F1", 4.9, 5.9}, {"B1", 5.9, 7.9}},
	})
	if math.Abs(r.Iteration-11.4) > 1e-12 || r.Busy[0] != 6 || r.Busy[1] != 6 {
		t.Errorf("iteration %v busy %v", r.Iteration, r.Busy)
	}
	if _, err := Simulate(s, Timing{F: []float64{1, 1}, B: []float64{2, 2}, Act: []float64{0.5}, Grad: []float64{0.5}, Post: []float64{0.1, 0.1}}); err == nil {
		t.Error("a Post of 2 entries for 1 edge was taken")
	}
	// a message waits up to 0.25 for its sender's next computing: act0
	// (stage 0 forwards again next) lands at 1.75; act1 and both
	// gradients (their senders wait next, or are done) as before
	r, err = Simulate(s, Timing{F: []float64{1, 1}, B: []float64{2, 2}, Act: []float64{0.5}, Grad: []float64{0.5}, Hold: []float64{0.25}})
	if err != nil {
		t.Fatal(err)
	}
	sameTimeline(t, timeline(r, 2), [][]span{
		{{"F0", 0, 1}, {"F1", 1, 2}, {"B0", 5.25, 7.25}, {"B1", 8.25, 10.25}},
		{{"F0", 1.75, 2.75}, {"B0", 2.75, 4.75}, {"F1", 4.75, 5.75}, {"B1", 5.75, 7.75}},
	})
	// stage 1 begins at 3 (making its inputs): act0, landed at 1.5, is
	// taken at 3.3; everything of it and after it moves on by 1.8
	r, err = Simulate(s, Timing{F: []float64{1, 1}, B: []float64{2, 2}, Act: []float64{0.5}, Grad: []float64{0.5},
		Post: []float64{0.1}, Take: []float64{0.3}, Begin: []float64{0, 3}})
	if err != nil {
		t.Fatal(err)
	}
	sameTimeline(t, timeline(r, 2), [][]span{
		{{"F0", 0, 1}, {"F1", 1.1, 2.1}, {"B0", 6.8, 8.8}, {"B1", 10.2, 12.2}},
		{{"F0", 3.3, 4.3}, {"B0", 4.3, 6.3}, {"F1", 6.7, 7.7}, {"B1", 7.7, 9.7}},
	})
}

// TestSimulateTwoBranchByHand: stages A=0 and B=1 feed C=2; 2 micro-batches;
// forward A=1 B=2 C=1, backward A=2 B=1 C=1, free transfers, C flushes in 0.5.
//
//	A: F0 0–1, F1 1–2, B0 4–6, B1 6–8
//	B: F0 0–2, F1 2–4, B0 4–5, B1 6–7
//	C: F0 2–3 (waits for B), B0 3–4, F1 4–5, B1 5–6, flush to 6.5
func TestSimulateTwoBranchByHand(t *testing.T) {
	s := mustSchedule(t, "1f1b", twoBranch(2))
	r, err := Simulate(s, Timing{
		F: []float64{1, 2, 1}, B: []float64{2, 1, 1}, Act: []float64{0, 0}, Grad: []float64{0, 0},
		Flush: []float64{0, 0, 0.5}, Static: []int64{100, 100, 100}, Stash: []int64{10, 20, 30},
	})
	if err != nil {
		t.Fatal(err)
	}
	sameTimeline(t, timeline(r, 3), [][]span{
		{{"F0", 0, 1}, {"F1", 1, 2}, {"B0", 4, 6}, {"B1", 6, 8}},
		{{"F0", 0, 2}, {"F1", 2, 4}, {"B0", 4, 5}, {"B1", 6, 7}},
		{{"F0", 2, 3}, {"B0", 3, 4}, {"F1", 4, 5}, {"B1", 5, 6}},
	})
	if r.Iteration != 8 {
		t.Errorf("iteration %v, want 8", r.Iteration)
	}
	if want := []int64{120, 140, 130}; fmt.Sprint(r.PeakMemory) != fmt.Sprint(want) {
		t.Errorf("peak memory %v, want %v", r.PeakMemory, want)
	}
}

// randomPipeline makes a random stage DAG with edges from lower to higher ids.
func randomPipeline(r *rand.Rand) Pipeline {
	n := 1 + r.Intn(8)
	p := Pipeline{Stages: n, MicroBatches: 1 + r.Intn(9)}
	for v := 1; v < n; v++ {
		for u := 0; u < v; u++ {
			if r.Intn(3) == 0 {
				p.Edges = append(p.Edges, [2]int{u, v})
			}
		}
	}
	return p
}

func TestSchedulesOnRandomDAGs(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	for i := 0; i < 500; i++ {
		p := randomPipeline(r)
		depth, err := p.Depth()
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"1f1b", "gpipe"} {
			s, err := New(name, p)
			if err != nil {
				t.Fatal(err)
			}
			if err := Check(s, nil); err != nil {
				t.Fatalf("%s on %+v: %v", name, p, err)
			}
			res, _ := Simulate(s, Unit(p))
			for st := range depth {
				want := p.MicroBatches
				if name == "1f1b" {
					want = min(p.MicroBatches, depth[st])
				}
				if res.InFlight[st] != want {
					t.Fatalf("%s on %+v: stage %d holds %d, want %d", name, p, st, res.InFlight[st], want)
				}
			}
		}
	}
}

func TestCheckRefusals(t *testing.T) {
	base := func() *Schedule { s, _ := OneFOneB(chain(2, 3)); return s }
	cases := []struct {
		name  string
		edit  func(s *Schedule)
		limit []int
		want  string
	}{
		{"missing action", func(s *Schedule) { s.Lists[1] = s.Lists[1][1:] }, nil, "actions"},
		{"B before F", func(s *Schedule) {
			l := s.Lists[1] // R0 F0 B0 S0 ... swap F0 and B0
			l[1], l[2] = l[2], l[1]
		}, nil, "F before B"},
		{"duplicate", func(s *Schedule) { s.Lists[0][0] = s.Lists[0][1] }, nil, "twice"},
		{"foreign action", func(s *Schedule) { s.Lists[0][1] = Action{Kind: Recv, MB: 0, Edge: 0, Dir: Act} }, nil, "belongs to stage 1"},
		{"over the limit", func(s *Schedule) {}, []int{1, 1}, "holds 2 micro-batches"},
		{"deadlock", func(s *Schedule) {
			// stage 0 waits for gradients of micro-batch 0 before sending its activations
			l := s.Lists[0]
			var fwd, rest []Action
			for _, a := range l {
				if a.MB == 0 && (a.Kind == Forward || a.Kind == Send) {
					fwd = append(fwd, a)
				} else {
					rest = append(rest, a)
				}
			}
			// move F0 and its send after the first backward's receive
			var out []Action
			for _, a := range rest {
				out = append(out, a)
				if a.Kind == Recv && a.Dir == Grad && a.MB == 0 {
					out = append(out, fwd...)
				}
			}
			s.Lists[0] = out
		}, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := base()
			tc.edit(s)
			err := Check(s, tc.limit)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
	// a true deadlock reaches the simulator as a DeadlockError
	s := base()
	s.Lists[1] = append([]Action{{Kind: Recv, MB: 2, Edge: 0, Dir: Act}}, s.Lists[1]...)
	_, err := Simulate(s, Unit(s.Pipe))
	var de *DeadlockError
	if !errors.As(err, &de) {
		t.Fatalf("got %v, want a deadlock", err)
	}
}

func TestParseActionRoundTrip(t *testing.T) {
	s := mustSchedule(t, "1f1b", twoBranch(3))
	for _, l := range s.Lists {
		for _, a := range l {
			b, err := ParseAction(a.String())
			if err != nil || b != a {
				t.Fatalf("%v → %q → %v, %v", a, a.String(), b, err)
			}
		}
	}
	for _, bad := range []string{"", "F", "3", "3X", "3Fx", "3S", "3Sa@", "3Sx@e1", "3Sa@e-1", "99999999999F"} {
		if _, err := ParseAction(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func FuzzParseAction(f *testing.F) {
	for _, s := range []string{"0F", "12B", "3W", "3Sa@e1", "4Rg@e0", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAction(s)
		if err == nil && a.String() != s {
			t.Fatalf("%q parses to %v, which prints as %q", s, a, a.String())
		}
	})
}

// TestSummarizeIsSimulate: the summary is the simulation without its events.
func TestSummarizeIsSimulate(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	for i := 0; i < 200; i++ {
		p := randomPipeline(r)
		tm := randomTiming(r, p, false)
		s := mustSchedule(t, "1f1b", p)
		full, err := Simulate(s, tm)
		if err != nil {
			t.Fatal(err)
		}
		sum, err := Summarize(s, tm)
		if err != nil {
			t.Fatal(err)
		}
		if len(full.Events) == 0 || sum.Events != nil {
			t.Fatalf("events: %d in the simulation, %d in the summary", len(full.Events), len(sum.Events))
		}
		full.Events = nil
		if fmt.Sprint(full) != fmt.Sprint(sum) {
			t.Fatalf("case %d: summary %+v, simulation %+v", i, sum, full)
		}
	}
}

func TestPeakBytesSaturates(t *testing.T) {
	const top = math.MaxInt64
	for _, tc := range []struct {
		static, stash int64
		n             int
		want          int64
	}{
		{5, 7, 0, 5},
		{5, 7, 3, 26},
		{0, top, 1, top},
		{1, top, 1, top},
		{top, 0, 9, top},
		{1 << 40, 1 << 40, 1 << 24, top},
		{1 << 40, 1 << 30, 1 << 20, 1<<40 + 1<<50},
	} {
		if got := peakBytes(tc.static, tc.stash, tc.n); got != tc.want {
			t.Errorf("peakBytes(%d, %d, %d) = %d, want %d", tc.static, tc.stash, tc.n, got, tc.want)
		}
	}
}
