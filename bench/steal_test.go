package bench

import "testing"

// TestParseCPULine: /proc/stat's aggregate line gives the total of its
// first eight fields (guest time is inside user time) and the eighth,
// steal; anything else is refused.
func TestParseCPULine(t *testing.T) {
	for _, c := range []struct {
		line         string
		total, steal uint64
		ok           bool
	}{
		{"cpu  10 1 5 80 2 0 1 7 3 0", 106, 7, true},
		{"cpu  10 1 5 80 2 0 1 7", 106, 7, true},
		{"cpu0 10 1 5 80 2 0 1 7 0 0", 0, 0, false},
		{"cpu  10 1 5 80 2 0 1", 0, 0, false},
		{"cpu  10 1 5 x 2 0 1 7 0 0", 0, 0, false},
	} {
		total, steal, ok := parseCPULine(c.line)
		if total != c.total || steal != c.steal || ok != c.ok {
			t.Errorf("%q: %d, %d, %v; want %d, %d, %v", c.line, total, steal, ok, c.total, c.steal, c.ok)
		}
	}
}
