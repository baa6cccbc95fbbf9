package runtime

import "testing"

// TestProbeLinks: every size gets a positive one-way time, and a message a
// thousand times larger takes longer.
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
