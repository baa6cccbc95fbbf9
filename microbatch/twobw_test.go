package microbatch

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

// TestTwoBWIsUnflushedOneFOneB: k iterations of 2bw back to back are
// exactly 1F1B over k batches' micro-batches with the same warm-up (no
// flush anywhere between), one iteration alone is 1F1B's flushed
// iteration, and each stage runs its warm-up less one forwards ahead.
func TestTwoBWIsUnflushedOneFOneB(t *testing.T) {
	t.Parallel()
	for _, p := range []Pipeline{chain(4, 3), chain(4, 6), twoBranch(4), chain(1, 2), {Stages: 4, Edges: [][2]int{{0, 1}, {0, 2}, {1, 3}, {2, 3}}, MicroBatches: 5}} {
		sch, err := TwoBW(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := Check(sch, nil); err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
		depth, _ := p.Depth()
		for k := 1; k <= 4; k++ {
			whole := p
			whole.MicroBatches = k * p.MicroBatches
			want, err := OneFOneBWarm(whole, depth)
			if err != nil {
				t.Fatal(err)
			}
			if got := sch.unroll(k); !reflect.DeepEqual(got.Lists, want.Lists) {
				t.Errorf("%+v: %d iterations of 2bw are not 1F1B over %d micro-batches:\n%v\nwant\n%v", p, k, whole.MicroBatches, got.Lists, want.Lists)
			}
		}
		one, _ := OneFOneBWarm(p, depth)
		if got := sch.Flushed(); !reflect.DeepEqual(got.Lists, one.Lists) || got.NoFlush {
			t.Errorf("%+v: one iteration alone is not 1F1B's", p)
		}
		for s, n := range sch.Ahead() {
			if n != depth[s]-1 {
				t.Errorf("%+v: stage %d runs %d ahead, want %d", p, s, n, depth[s]-1)
			}
		}
	}
}

// TestTwoBWStaleness: a stage may run at most one batch ahead of its
// update; deeper than that is a StalenessError that says how many
// micro-batches it needs; a stage without successors runs nothing ahead.
func TestTwoBWStaleness(t *testing.T) {
	t.Parallel()
	if _, err := TwoBW(chain(4, 3)); err != nil {
		t.Errorf("4 stages, 3 micro-batches: %v (stage 0 runs 3 ahead, a whole batch)", err)
	}
	_, err := TwoBW(chain(4, 2))
	var se *StalenessError
	if !errors.As(err, &se) || se.Stage != 0 || se.Warm != 4 || se.MicroBatches != 2 {
		t.Fatalf("4 stages, 2 micro-batches: %v, want a StalenessError at stage 0", err)
	}
	if !strings.Contains(err.Error(), "needs at least 3 micro-batches per batch") {
		t.Errorf("error %q does not say how many it needs", err)
	}
	if _, err := TwoBWWarm(chain(2, 4), []int{3, 2}); err == nil || !strings.Contains(err.Error(), "no successors") {
		t.Errorf("a sink running ahead: %v", err)
	}
	if _, err := NewTimed("2bw", chain(4, 2), Unit(chain(4, 2)), 0); !errors.As(err, &se) {
		t.Errorf("NewTimed: %v, want a StalenessError", err)
	}
}

// TestTwoBWSteadyStateHasNoBubble: on a balanced chain with free
// transfers the steady state keeps every stage busy (period M·(F+B),
// no bubble), where 1F1B pays its fill and drain each iteration; a stage
// holds its warm-up count at most, as 1F1B does.
func TestTwoBWSteadyStateHasNoBubble(t *testing.T) {
	t.Parallel()
	p := chain(4, 6)
	tm := Timing{F: []float64{1, 1, 1, 1}, B: []float64{2, 2, 2, 2}, Act: make([]float64, 3), Grad: make([]float64, 3), Flush: []float64{0.5, 0.5, 0.5, 0.5}}
	two, _ := TwoBW(p)
	r2, err := Simulate(two, tm)
	if err != nil {
		t.Fatal(err)
	}
	one, _ := OneFOneB(p)
	r1, err := Simulate(one, tm)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(r2.Iteration-(6*3+0.5)) > 1e-9 || r2.Bubble > 0.03 {
		t.Errorf("2bw: period %g, bubble %g; want %g, about 0", r2.Iteration, r2.Bubble, 6*3+0.5)
	}
	if want := 6*3 + 3*3 + 0.5; math.Abs(r1.Iteration-want) > 1e-9 {
		t.Errorf("1f1b: iteration %g, want %g", r1.Iteration, want)
	}
	if !reflect.DeepEqual(r2.InFlight, r1.InFlight) {
		t.Errorf("2bw holds %v, 1f1b %v", r2.InFlight, r1.InFlight)
	}
	if r2.Span <= 4*r2.Iteration || len(r2.Events) == 0 {
		t.Errorf("span %g over %d events: want several iterations", r2.Span, len(r2.Events))
	}
	sum, err := Summarize(two, tm)
	if err != nil || sum.Iteration != r2.Iteration || sum.Events != nil {
		t.Errorf("Summarize: %v, %+v", err, sum)
	}
}

// TestCheckNoFlush: a steady list that runs a backward of the next batch,
// or an index past two batches, is refused.
func TestCheckNoFlush(t *testing.T) {
	t.Parallel()
	for name, edit := range map[string]func(*Schedule){
		"next batch's backward": func(s *Schedule) {
			for i, a := range s.Lists[1] {
				if a.Kind == Backward {
					s.Lists[1][i].MB += s.Pipe.MicroBatches
					return
				}
			}
		},
		"past two batches": func(s *Schedule) { s.Lists[0][0].MB = 99 },
		"split":            func(s *Schedule) { s.Split = true },
		"a forward lost": func(s *Schedule) {
			for i, a := range s.Lists[0] {
				if a.Kind == Forward && a.MB >= s.Pipe.MicroBatches {
					s.Lists[0] = append(s.Lists[0][:i], s.Lists[0][i+1:]...)
					return
				}
			}
		},
	} {
		sch, _ := TwoBW(chain(3, 4))
		edit(sch)
		if err := Check(sch, nil); err == nil {
			t.Errorf("%s: checked", name)
		}
	}
}

func TestTwoBWGrid(t *testing.T) {
	t.Parallel()
	g, err := Grid(mustSchedule(t, "2bw", chain(3, 3)))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "2bw-chain3-m3", g)
}
