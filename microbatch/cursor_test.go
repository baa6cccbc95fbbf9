package microbatch

import (
	"strings"
	"testing"
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
