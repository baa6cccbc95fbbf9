package tensor

import (
	"math"
	"testing"
)

// TestBF16: rounding to nearest even at the halfway points, NaN and the
// infinities, and every bf16 value widening and rounding back to itself.
func TestBF16(t *testing.T) {
	for _, tc := range []struct {
		x    float32
		want uint16
	}{
		{1, 0x3f80},
		{math.Float32frombits(0x3f808000), 0x3f80}, // halfway, even below
		{math.Float32frombits(0x3f818000), 0x3f82}, // halfway, even above
		{math.Float32frombits(0x3f808001), 0x3f81}, // past halfway
		{float32(math.Inf(1)), 0x7f80},
		{float32(math.Inf(-1)), 0xff80},
		{math.MaxFloat32, 0x7f80}, // rounds up to the infinity
		{-0.0, 0x0000},
	} {
		if got := ToBF16(tc.x); got != tc.want {
			t.Errorf("ToBF16(%g = %#x) = %#x, want %#x", tc.x, math.Float32bits(tc.x), got, tc.want)
		}
	}
	if h := ToBF16(float32(math.NaN())); h != 0x7fc0 || !math.IsNaN(float64(FromBF16(h))) {
		t.Errorf("NaN -> %#x", h)
	}
	for h := 0; h < 1<<16; h++ {
		x := FromBF16(uint16(h))
		if math.IsNaN(float64(x)) {
			continue
		}
		if back := ToBF16(x); back != uint16(h) {
			t.Fatalf("%#x widens to %g, which rounds to %#x", h, x, back)
		}
	}
}
