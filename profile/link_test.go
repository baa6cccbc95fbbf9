package profile

import "testing"

// TestProbeLinks: every size gets a positive one-way time, and a message a
// thousand times larger takes longer; sizes and rounds that cannot be
// probed are refused.
func TestProbeLinks(t *testing.T) {
	got, err := ProbeLinks([]int{1 << 10, 1 << 20}, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !(got[0] > 0) || !(got[1] > got[0]) {
		t.Fatalf("one-way times %v", got)
	}
	t.Logf("one way: 1 KiB %.1f µs, 1 MiB %.1f µs", got[0]*1e6, got[1]*1e6)
	if _, err := ProbeLinks([]int{0}, 5); err == nil {
		t.Fatal("a message of no bytes was probed")
	}
	if _, err := ProbeLinks([]int{1}, 0); err == nil {
		t.Fatal("no rounds were probed")
	}
}

// TestHostLinkSizes: a quick probe is a part of the full one, with fewer
// rounds, and every size is one FitLink can use (at least two, ascending).
func TestHostLinkSizes(t *testing.T) {
	full, fullReps := HostLinkSizes(false)
	quick, quickReps := HostLinkSizes(true)
	for _, s := range [][]int{full, quick} {
		if len(s) < 2 {
			t.Fatalf("sizes %v: a fit needs two", s)
		}
		for i := 1; i < len(s); i++ {
			if s[i] <= s[i-1] {
				t.Fatalf("sizes %v do not grow", s)
			}
		}
	}
	if len(quick) >= len(full) || quickReps >= fullReps || quickReps < 1 {
		t.Errorf("quick %v × %d is not less than full %v × %d", quick, quickReps, full, fullReps)
	}
}

// TestTransport: both rates of a small stream are positive and finite, and
// a message of no bytes is refused.
func TestTransport(t *testing.T) {
	links, raw, err := transport(64<<10, 32)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		name string
		rate float64
	}{{"links", links}, {"raw", raw}} {
		if !(r.rate > 0) || r.rate > 1e15 {
			t.Errorf("%s: %g bytes per second", r.name, r.rate)
		}
	}
	t.Logf("64 KiB messages: links %.3g GB/s, raw NATS %.3g GB/s", links/1e9, raw/1e9)
	if _, _, err := transport(0, 8); err == nil {
		t.Error("messages of no bytes were streamed")
	}
}
