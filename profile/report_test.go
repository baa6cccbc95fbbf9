package profile

import (
	"strings"
	"testing"
	"time"
)

// TestProbeReport: the iterations probe's report is a worker's report's
// size (a couple of KiB of JSON), carries when the go came, and a report
// that does not decode is refused by name.
func TestProbeReport(t *testing.T) {
	start := time.Unix(1700000000, 0)
	came := start.Add(123456 * time.Nanosecond)
	b, err := newProbeReport(2, 7, came)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(b); n < 1500 || n > 4096 {
		t.Errorf("a probe report of %d bytes, want a worker's report's couple of KiB", n)
	}
	got, err := cameOf(b, start)
	if err != nil {
		t.Fatal(err)
	}
	if want := 123456e-9; got < want-1e-12 || got > want+1e-12 {
		t.Errorf("came %g s after the start, want %g", got, want)
	}
	if _, err := cameOf(b[:len(b)/2], start); err == nil || !strings.Contains(err.Error(), "probe's report") {
		t.Errorf("a cut report: %v, want an error naming the probe's report", err)
	}
}

// TestTypical: the mean without the slowest tenth, so that one stall in
// ten samples moves nothing, and nothing is dropped from fewer than ten.
func TestTypical(t *testing.T) {
	for _, c := range []struct {
		name string
		xs   []float64
		want float64
	}{
		{"a stall left out", []float64{1, 1, 1, 100, 1, 1, 1, 1, 1, 1}, 1},
		{"the slowest tenth of twenty", []float64{20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, 9.5},
		{"fewer than ten: the mean", []float64{1, 2, 3, 10}, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := typical(c.xs); got != c.want {
				t.Errorf("typical(%v) = %g, want %g", c.xs, got, c.want)
			}
		})
	}
	if got := typical(nil); got == got {
		t.Errorf("typical of nothing = %g, want NaN", got)
	}
}
