package cudatest

import (
	"math"
	"testing"
)

// Near fails where got and want (a device's values and the CPU's) differ
// by more than tol relative to 1 + |want| (a NaN on one side alone fails)
// or in length, and returns the largest difference.
func Near(t testing.TB, what string, got, want []float32, tol float64) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var worst float64
	for j := range want {
		if math.IsNaN(float64(got[j])) && math.IsNaN(float64(want[j])) {
			continue
		}
		rel := math.Abs(float64(got[j])-float64(want[j])) / (1 + math.Abs(float64(want[j])))
		if !(rel <= tol) { // NaN on one side fails
			t.Fatalf("%s[%d]: device %v, CPU %v", what, j, got[j], want[j])
		}
		worst = max(worst, rel)
	}
	return worst
}
