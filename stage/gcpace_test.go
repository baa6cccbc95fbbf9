package stage

import (
	"runtime/debug"
	"testing"
)

func TestPacePercent(t *testing.T) {
	for _, c := range []struct {
		live, step uint64
		want       int
	}{
		{0, 0, 100},                                      // nothing allocated: the default (minLive)
		{0, 1 << 20, gcSteps * 100 / 4},                  // before any collection: from minLive
		{8 << 20, 6 << 20, gcSteps * 75},                 // a small stage allocating most of its heap a step
		{64 << 20, 1 << 20, 100},                         // a stage that allocates little keeps the default
		{4 << 30, 256 << 20, 12},                         // a large heap grows by two steps' allocations, not its size
		{2 << 30, 210 << 20, 20},                         // the default mlp: 2 GB of state, 210 MB a step
		{4 << 30, 1 << 20, 6},                            // by maxHeadroom where that is more
		{1 << 20, 16 << 20, gcSteps * 400},               // the floor counts from minLive
		{1 << 20, 64 << 20, maxHeadroom * 100 / minLive}, // at most maxHeadroom
	} {
		if got := pacePercent(c.live, c.step); got != c.want {
			t.Errorf("pacePercent(%d, %d) = %d, want %d", c.live, c.step, got, c.want)
		}
	}
}

// TestGCPacerLeavesUsersGOGC: with GOGC set, adjust changes nothing;
// without, it sets the percentage it says it set.
func TestGCPacerLeavesUsersGOGC(t *testing.T) {
	old := debug.SetGCPercent(123)
	defer debug.SetGCPercent(old)
	(&gcPacer{user: true}).adjust()
	if got := debug.SetGCPercent(123); got != 123 {
		t.Errorf("with the user's GOGC, the percentage became %d", got)
	}
	g := &gcPacer{}
	g.adjust()
	if got := debug.SetGCPercent(123); got != g.percent || got < 1 {
		t.Errorf("the percentage is %d, adjust says it set %d (at least 1)", got, g.percent)
	}
}
