package tensor

import (
	"math"
	"math/rand"
	"testing"
)

// vmathInputs are a dense grid over where the functions change, random
// values of every magnitude, and the special values.
func vmathInputs() []float32 {
	var xs []float32
	for x := -120.0; x <= 100; x += 0.00731 {
		xs = append(xs, float32(x))
	}
	r := rand.New(rand.NewSource(3))
	for i := 0; i < 20000; i++ {
		xs = append(xs, float32(r.NormFloat64()*math.Pow(10, float64(r.Intn(9)-6))))
	}
	inf := float32(math.Inf(1))
	xs = append(xs, 0, float32(math.Copysign(0, -1)), inf, -inf, float32(math.NaN()), math.MaxFloat32, -math.MaxFloat32,
		math.SmallestNonzeroFloat32, 88.72283, 88.72284, -87.33654, -103.97, 1e-30, -1e-30)
	for len(xs)%8 != 3 { // a tail for the naive path as well
		xs = append(xs, 0.5)
	}
	return xs
}

// ulpErr is |got − want| in units of float32's spacing at want, and at least
// 2^-142 (2^-16 of the smallest normal number): subnormal results have fewer
// significant bits than the products that make them, so near 0 results are
// judged absolutely.
func ulpErr(got float32, want float64) float64 {
	if math.IsNaN(want) {
		if math.IsNaN(float64(got)) {
			return 0
		}
		return math.Inf(1)
	}
	if w := float64(float32(want)); math.IsInf(w, 0) || math.IsInf(float64(got), 0) {
		if float64(got) == w {
			return 0
		}
		return math.Inf(1)
	}
	w := float32(want)
	spacing := math.Max(float64(math.Nextafter32(float32(math.Abs(float64(w))), inf32)-float32(math.Abs(float64(w)))), 0x1p-142)
	return math.Abs(float64(got)-want) / spacing
}

var inf32 = float32(math.Inf(1))

// TestVMathAgainstFloat64 holds the vector kernels to the float64 oracles
// within a few float32 ulps (worst case printed), special values included.
func TestVMathAgainstFloat64(t *testing.T) {
	if !hasVMath {
		t.Log("no AVX2/FMA here: the kernels are the oracles themselves")
	}
	xs := vmathInputs()
	got := make([]float32, len(xs))
	cases := []struct {
		name  string
		run   func(dst, x []float32)
		exact func(x float64) float64
		ulps  float64
	}{
		{"exp", Exp, math.Exp, 2},
		// For small x > 0, Φ = 1 − erfc/2 carries erfc's float32 evaluation
		// error (its polynomial's terms cancel): up to about 8e-7 relative.
		{"gelu", GELU, func(x float64) float64 { return x * phi(x) }, 8},
		{"gelu'", func(dst, x []float32) {
			gy := make([]float32, len(x))
			for i := range gy {
				gy[i] = 1
			}
			clear(dst)
			GELUGrad(dst, x, gy)
		}, func(x float64) float64 { return phi(x) + x*math.Exp(-x*x/2)/math.Sqrt(2*math.Pi) }, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.run(got, xs)
			worst, at := 0.0, float32(0)
			for i, x := range xs {
				want := c.exact(float64(x))
				e := ulpErr(got[i], want)
				if c.name == "gelu'" {
					// Φ(x) + x·φ(x) cancels near x ≈ −0.75: judge it on the
					// scale of its terms, 2^-23 apart at 1.
					scale := phi(float64(x)) + math.Abs(float64(x))*math.Exp(-float64(x)*float64(x)/2)/math.Sqrt(2*math.Pi)
					e = math.Min(e, math.Abs(float64(got[i])-want)/(scale*0x1p-23))
				}
				if e > worst {
					worst, at = e, x
				}
			}
			t.Logf("worst %.2f ulp at x = %g", worst, at)
			if worst > c.ulps {
				t.Errorf("%s(%g) = %g, want %g (%.2f ulp, allowed %g)", c.name, at, got[indexOf(xs, at)], c.exact(float64(at)), worst, c.ulps)
			}
		})
	}
}

// phi is the standard normal CDF in float64, through erfc: 1 + erf(x/√2)
// cancels to 0 below x ≈ −8.
func phi(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }

func indexOf(xs []float32, v float32) int {
	for i, x := range xs {
		if x == v || x != x && v != v {
			return i
		}
	}
	return -1
}

// TestGELUGradAccumulates checks that the gradient adds to gx and scales by
// gy, and is within 1e-7 absolute of the oracle near GELU's minimum.
func TestGELUGradAccumulates(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	for _, n := range []int{1, 7, 8, 9, 64, 1003} {
		x, gy := make([]float32, n), make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64()*2 - 0.75)
			gy[i] = float32(r.NormFloat64())
		}
		gx := make([]float32, n)
		want := make([]float32, n)
		for i := range gx {
			gx[i] = float32(i)
			want[i] = float32(i)
		}
		GELUGrad(gx, x, gy)
		GELUGradNaive(want, x, gy)
		for i := range gx {
			if d := math.Abs(float64(gx[i] - want[i])); d > 2e-7*(1+math.Abs(float64(want[i]))) {
				t.Fatalf("n=%d: gx[%d] = %v, want %v (x %v, gy %v)", n, i, gx[i], want[i], x[i], gy[i])
			}
		}
	}
}

// TestExpInPlace checks that dst may be x.
func TestExpInPlace(t *testing.T) {
	x := []float32{0, 1, -1, 2, -2, 3, -3, 4, -4, 10}
	want := make([]float32, len(x))
	ExpNaive(want, x)
	Exp(x, x)
	for i := range x {
		if ulpErr(x[i], float64(want[i])) > 2 {
			t.Fatalf("element %d: %v, want %v", i, x[i], want[i])
		}
	}
}

// BenchmarkVMath reports each vector kernel beside its float64 oracle on a
// 1 Mi-element tensor (an FFN activation of 16 × 64 tokens × 1024).
func BenchmarkVMath(b *testing.B) {
	r := rand.New(rand.NewSource(5))
	x := make([]float32, 1<<20)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 3)
	}
	y, gy := make([]float32, len(x)), make([]float32, len(x))
	for _, k := range []struct {
		name string
		fn   func()
	}{
		{"exp", func() { Exp(y, x) }}, {"exp-naive", func() { ExpNaive(y, x) }},
		{"gelu", func() { GELU(y, x) }}, {"gelu-naive", func() { GELUNaive(y, x) }},
		{"gelu-grad", func() { GELUGrad(y, x, gy) }}, {"gelu-grad-naive", func() { GELUGradNaive(y, x, gy) }},
	} {
		b.Run(k.name, func(b *testing.B) {
			b.SetBytes(int64(4 * len(x)))
			for i := 0; i < b.N; i++ {
				k.fn()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(x)), "ns/element")
		})
	}
}
