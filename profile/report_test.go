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
