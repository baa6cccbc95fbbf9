package tensor

import (
	"fmt"
	"math"
	"testing"
)

// TestAllFinite: one NaN or infinity anywhere (in the vector body, in the
// tail, first or last) makes a slice not finite; extreme finite values do
// not; with the vector path and without.
func TestAllFinite(t *testing.T) {
	defer func(v bool) { hasVMath = v }(hasVMath)
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
	for _, vec := range []bool{false, hasVMath} {
		hasVMath = vec
		for _, n := range []int{0, 1, 5, 31, 32, 33, 64, 100, 1000} {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(i%7-3) * 1e30
				if i%5 == 0 {
					x[i] = math.MaxFloat32
				}
			}
			if !AllFinite(x) {
				t.Fatalf("vec %v n %d: finite values read as not finite", vec, n)
			}
			for _, at := range []int{0, n / 2, n - 1} {
				for _, b := range bad {
					if n == 0 {
						continue
					}
					y := append([]float32(nil), x...)
					y[at] = b
					t.Run(fmt.Sprintf("vec=%v/n=%d/at=%d/%v", vec, n, at, b), func(t *testing.T) {
						if AllFinite(y) {
							t.Fatal("read as finite")
						}
					})
				}
			}
		}
	}
}
