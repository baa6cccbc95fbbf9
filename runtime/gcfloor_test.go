package runtime

import (
	"runtime/debug"
	"testing"
)

func TestFloorPercent(t *testing.T) {
	for _, c := range []struct {
		live, step uint64
		want       int
	}{
		{0, 0, 100},                                      // nothing allocated: the default
		{0, 1 << 20, gcSteps * 100 / 4},                  // before any collection: from minLive
		{8 << 20, 6 << 20, gcSteps * 75},                 // a small stage allocating most of its heap a step
		{64 << 20, 1 << 20, 100},                         // a stage that allocates little keeps the default
		{4 << 30, 256 << 20, 100},                        // a large heap doubles, as by default
		{1 << 20, 16 << 20, gcSteps * 400},               // the floor counts from minLive
		{1 << 20, 64 << 20, maxHeadroom * 100 / minLive}, // at most maxHeadroom
	} {
		if got := floorPercent(c.live, c.step); got != c.want {
			t.Errorf("floorPercent(%d, %d) = %d, want %d", c.live, c.step, got, c.want)
		}
	}
}

// TestGCFloorLeavesUsersGOGC: with GOGC set, adjust changes nothing;
// without, it sets a percentage of at least 100.
func TestGCFloorLeavesUsersGOGC(t *testing.T) {
	old := debug.SetGCPercent(123)
	defer debug.SetGCPercent(old)
	(&gcFloor{user: true}).adjust()
	if got := debug.SetGCPercent(123); got != 123 {
		t.Errorf("with the user's GOGC, the percentage became %d", got)
	}
	g := &gcFloor{}
	g.adjust()
	if got := debug.SetGCPercent(123); got != g.percent || got < 100 {
		t.Errorf("the percentage is %d, adjust says it set %d (at least 100)", got, g.percent)
	}
}
