package tensor

import "math"

// Element-wise transcendental kernels for float32 slices: e^x, and GELU (the
// exact, erf form) with its gradient. On amd64 with AVX2 and FMA they run 8
// lanes at a time in assembly (vmath_amd64.s), the last len % 8 elements
// through a padded block, so that an element's result never depends on where
// it sits (a data-parallel replica's half of a micro-batch computes what the
// whole would); elsewhere they run the naive versions below, which compute
// in float64 with package math and are the oracles the tests compare against.
//
// The assembly's method:
//   - e^x: x = n·ln2 + r with n = round(x·log2 e) and |r| ≤ ln2/2 (ln2 in
//     two parts, Cody and Waite); e^r = 1 + r + r²·P(r), P of degree 5
//     with Cephes' expf coefficients; 2^n built in the exponent bits. Below
//     −87.34 (where e^x leaves float32's normal range) the result is 0,
//     above 88.38 +Inf; NaN stays NaN.
//   - Φ(x), the normal CDF: Φ(x) = erfc(−x/√2)/2 with erfc(z) = t·e^(−z² +
//     Q(t)), t = 1/(1 + z/2), Q of degree 9 (Numerical Recipes' erfcc,
//     fractional error below 1.2e-7 for every z ≥ 0), and Φ(x) = 1 − Φ(−x)
//     for x > 0. z² = x²/2 is taken exactly as hi + lo (x·x and its FMA
//     remainder) and e^(−hi/2) apart from e^(Q − lo/2), so that large |x|
//     keeps its relative accuracy.
//   - GELU(x) = x·Φ(x); GELU'(x) = Φ(x) + x·φ(x), φ(x) = e^(−x²/2)/√(2π).

// Exp sets dst[i] = e^x[i]; dst and x have the same length and may be the
// same slice.
func Exp(dst, x []float32) { elementwise(dst, x, expVec, ExpNaive) }

// elementwise runs vec over x into dst, 8 lanes at a time and the rest in a
// padded block, or naive without AVX2.
func elementwise(dst, x []float32, vec func(dst, x *float32, n int), naive func(dst, x []float32)) {
	n := len(x)
	_ = dst[:n]
	if !hasVMath {
		naive(dst[:n], x)
		return
	}
	body := n &^ 7
	if body > 0 {
		vec(&dst[0], &x[0], body)
	}
	if body < n {
		var d, v [8]float32
		copy(v[:], x[body:])
		vec(&d[0], &v[0], 8)
		copy(dst[body:n], d[:])
	}
}

// ExpNaive is Exp in float64 through math.Exp: the oracle.
func ExpNaive(dst, x []float32) {
	for i, v := range x {
		dst[i] = float32(math.Exp(float64(v)))
	}
}

// GELU sets y[i] = x[i]·Φ(x[i]), Φ the standard normal CDF; y and x have the
// same length and may be the same slice.
func GELU(y, x []float32) { elementwise(y, x, geluVec, GELUNaive) }

// GELUNaive is GELU in float64 through math.Erfc (1 + erf(x/√2) would
// cancel to 0 below x ≈ −8): the oracle.
func GELUNaive(y, x []float32) {
	for i, v := range x {
		f := float64(v)
		y[i] = float32(f * 0.5 * math.Erfc(-f/math.Sqrt2))
	}
}

// GELUGrad adds gy[i]·GELU'(x[i]) to gx[i] (backward kernels accumulate);
// the three slices have the same length.
func GELUGrad(gx, x, gy []float32) {
	n := len(x)
	_, _ = gx[:n], gy[:n]
	if !hasVMath {
		GELUGradNaive(gx[:n], x, gy[:n])
		return
	}
	body := n &^ 7
	if body > 0 {
		geluGradVec(&gx[0], &x[0], &gy[0], body)
	}
	if body < n {
		var a, v, g [8]float32
		copy(a[:], gx[body:n])
		copy(v[:], x[body:])
		copy(g[:], gy[body:n])
		geluGradVec(&a[0], &v[0], &g[0], 8)
		copy(gx[body:n], a[:])
	}
}

// GELUGradNaive is GELUGrad in float64 through math.Erfc and math.Exp: the
// oracle.
func GELUGradNaive(gx, x, gy []float32) {
	for i, v := range x {
		f := float64(v)
		d := 0.5*math.Erfc(-f/math.Sqrt2) + f*math.Exp(-f*f/2)/math.Sqrt(2*math.Pi)
		gx[i] += gy[i] * float32(d)
	}
}
