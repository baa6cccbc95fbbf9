package bench

import (
	"strconv"
	"strings"
	"testing"
)

// TestGPTLadder: each rung of the memory section's ladder builds, and its
// parameter count is the one its name says, within 10%.
func TestGPTLadder(t *testing.T) {
	for _, s := range gptLadder {
		g, err := gptGraph(s, 8)
		if err != nil {
			t.Fatal(err)
		}
		want, unit := 0.0, 1e9
		num := strings.TrimSuffix(s.name, "B")
		if strings.HasSuffix(s.name, "T") {
			num, unit = strings.TrimSuffix(s.name, "T"), 1e12
		}
		if want, err = strconv.ParseFloat(num, 64); err != nil {
			t.Fatal(err)
		}
		want *= unit
		if got := float64(params(g)); got < 0.9*want || got > 1.1*want {
			t.Errorf("%s: %.4g parameters", s.name, got)
		}
	}
}
