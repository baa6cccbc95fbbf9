package tensor

import (
	"math"
	"math/rand"
	"testing"
)

// TestReLUVectorMatchesLoop: ReLU and ReLUGrad with the vector path leave
// the bits the Go loop leaves, with ±0, ±Inf and NaN among x, gy and gx,
// on lengths around the vector width.
func TestReLUVectorMatchesLoop(t *testing.T) {
	if !hasVMath {
		t.Skip("no AVX2 here: the loop alone runs")
	}
	defer func(v bool) { hasVMath = v }(hasVMath)
	r := rand.New(rand.NewSource(13))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-40, -1e-40}
	fill := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
			if r.Intn(4) == 0 {
				x[i] = special[r.Intn(len(special))]
			}
		}
		return x
	}
	same := func(a, b []float32) bool {
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				return false
			}
		}
		return true
	}
	for _, n := range []int{0, 1, 7, 8, 9, 16, 31, 100, 1000} {
		x, gy, gx := fill(n), fill(n), fill(n)
		y1, y2 := make([]float32, n), make([]float32, n)
		g1, g2 := append([]float32(nil), gx...), append([]float32(nil), gx...)
		hasVMath = true
		ReLU(y1, x)
		ReLUGrad(g1, x, gy)
		hasVMath = false
		ReLU(y2, x)
		ReLUGrad(g2, x, gy)
		if !same(y1, y2) || !same(g1, g2) {
			t.Fatalf("n %d: vector and loop differ:\nx %v\ny %v / %v\ngx %v / %v", n, x, y1, y2, g1, g2)
		}
	}
}
