package tensor

import (
	"math"
	"math/rand"
	"testing"
	"unsafe"
)

// TestAdamStepLayout: the vector kernel reads AdamStep's fields at these
// offsets.
func TestAdamStepLayout(t *testing.T) {
	var a AdamStep
	got := []uintptr{unsafe.Offsetof(a.Scale), unsafe.Offsetof(a.Coupled), unsafe.Offsetof(a.Shrink), unsafe.Offsetof(a.Beta1),
		unsafe.Offsetof(a.Beta2), unsafe.Offsetof(a.Eps), unsafe.Offsetof(a.Step), unsafe.Offsetof(a.SqrtBC2)}
	for i, o := range got {
		if o != uintptr(4*i) {
			t.Fatalf("field %d at offset %d, the kernel reads %d", i, o, 4*i)
		}
	}
}

// TestAdamStepVectorMatchesLoop: Apply (the AVX-512 kernel where the CPU
// has it) leaves p, g, m and v bit for bit where ApplyGo's loop leaves
// them, for every combination of the optional operations, on lengths
// around the vector width, with zeros, tiny and huge values, infinities
// and NaNs among the inputs.
func TestAdamStepVectorMatchesLoop(t *testing.T) {
	if !hasAVX512 {
		t.Log("no AVX-512 here: Apply is ApplyGo's loop")
	}
	r := rand.New(rand.NewSource(7))
	special := []float32{0, float32(math.Copysign(0, -1)), 1e-30, -1e30, float32(math.Inf(1)), float32(math.NaN()), 1e-40}
	fill := func(n int, pos bool) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
			if pos {
				x[i] = float32(math.Abs(r.NormFloat64()) * 1e-3)
			}
			if r.Intn(50) == 0 {
				x[i] = special[r.Intn(len(special))]
			}
		}
		return x
	}
	for flags := 0; flags < 16; flags++ {
		for _, n := range []int{1, 15, 16, 17, 33, 100, 1000} {
			a := AdamStep{Scale: 1, Coupled: 0, Shrink: 1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 0.0123, SqrtBC2: 0.0447, Clear: flags&2 != 0}
			if flags&1 != 0 {
				a.Scale = 0.37
			}
			if flags&4 != 0 {
				a.Coupled = 0.01
			}
			if flags&8 != 0 {
				a.Shrink = 0.999
			}
			p, g, m, v := fill(n, false), fill(n, false), fill(n, false), fill(n, true)
			p2, g2, m2, v2 := append([]float32(nil), p...), append([]float32(nil), g...), append([]float32(nil), m...), append([]float32(nil), v...)
			a.Apply(p, g, m, v)
			a.ApplyGo(p2, g2, m2, v2)
			for i := 0; i < n; i++ {
				for _, c := range [][2]float32{{p[i], p2[i]}, {g[i], g2[i]}, {m[i], m2[i]}, {v[i], v2[i]}} {
					if math.Float32bits(c[0]) != math.Float32bits(c[1]) && !(c[0] != c[0] && c[1] != c[1]) {
						t.Fatalf("flags %b n %d element %d: vector %v, loop %v (p %v/%v g %v/%v m %v/%v v %v/%v)",
							flags, n, i, c[0], c[1], p[i], p2[i], g[i], g2[i], m[i], m2[i], v[i], v2[i])
					}
				}
			}
		}
	}
}
