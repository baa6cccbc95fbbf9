package profile

import (
	"math"
	"testing"
)

// TestJoinWays: a round's one-way times are each branch's activation, from
// its send to the join's taking, and its gradient, from the join's send to
// the branch's taking, on the host's clock; a worker that reported no
// stamp for a branch leaves that branch out.
func TestJoinWays(t *testing.T) {
	st := []joinStamps{{}, // the measuring process
		{SentA: []int64{1000}, TookG: []int64{9000}},
		{SentA: []int64{0, 1500}, TookG: []int64{0, 9800}},
		{TookA: []int64{1200, 1900}, SentG: []int64{8000, 8100}},
	}
	got := joinWays(st, 3)
	want := []float64{200e-9, 1000e-9, 400e-9, 1700e-9}
	if len(got) != len(want) {
		t.Fatalf("%v, want %v", got, want)
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-15 {
			t.Errorf("%v, want %v", got, want)
			break
		}
	}
	st[2] = joinStamps{}
	if got := joinWays(st, 3); len(got) != 2 {
		t.Errorf("a branch without stamps: %v, want the other branch's two", got)
	}
}
