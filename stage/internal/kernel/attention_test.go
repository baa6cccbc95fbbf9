package kernel

import (
	"math/rand"
	"runtime"
	"testing"
)

// TestAttentionHeadsInParallel: at a size where eachHead splits the (sample,
// head) pairs over goroutines, attention's forward and backward equal, bit
// for bit, what one goroutine computes.
func TestAttentionHeadsInParallel(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Log("one CPU: the goroutines still interleave, the comparison still holds")
	}
	const n, s, d, heads = 4, 32, 64, 4
	if n*heads*s*s*(d/heads) < 1<<17 {
		t.Fatal("too small to take the parallel path")
	}
	r := rand.New(rand.NewSource(7))
	fill := func(shape ...int) *Value[float32] {
		v := NewValue[float32](shape...)
		for i := range v.Data {
			v.Data[i] = float32(r.NormFloat64())
		}
		return v
	}
	x := fill(n, s, d)
	p := []*Value[float32]{fill(3*d, d), fill(3 * d), fill(d, d), fill(d)}
	gy := fill(n, s, d)
	run := func(procs int, causal bool) (y, gx *Value[float32], gp []*Value[float32]) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		k := &attention[float32]{heads: heads, causal: causal}
		y, st, err := k.Forward([]*Value[float32]{x}, p)
		if err != nil {
			t.Fatal(err)
		}
		gx = NewValue[float32](n, s, d)
		gp = []*Value[float32]{NewValue[float32](3*d, d), NewValue[float32](3 * d), NewValue[float32](d, d), NewValue[float32](d)}
		k.Backward(gy, []*Value[float32]{x}, p, y, st, []*Value[float32]{gx}, gp)
		return y, gx, gp
	}
	same := func(what string, a, b []float32) {
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("%s[%d]: %v on one goroutine, %v on several", what, i, a[i], b[i])
			}
		}
	}
	for _, causal := range []bool{false, true} {
		y1, gx1, gp1 := run(1, causal)
		y2, gx2, gp2 := run(4, causal)
		same("y", y1.Data, y2.Data)
		same("gx", gx1.Data, gx2.Data)
		for i := range gp1 {
			same("gp", gp1[i].Data, gp2[i].Data)
		}
	}
}
