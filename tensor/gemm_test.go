package tensor

import (
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"testing"
)

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

// TestSgemmAgainstNaive checks the packed kernels against the oracle on
// shapes around every tile and block edge, both transposes, strides wider
// than the matrix, and alpha/beta.
func TestSgemmAgainstNaive(t *testing.T) {
	defer use(kernels[0])
	for _, k := range kernels {
		use(k)
		t.Run(k.name, testSgemmAgainstNaive)
	}
}

func testSgemmAgainstNaive(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	sizes := []int{1, 2, 5, 6, 7, 15, 16, 17, 71, 72, 73, 255, 256, 257}
	for trial := 0; trial < 120; trial++ {
		m, n, k := sizes[r.Intn(len(sizes))], sizes[r.Intn(len(sizes))], sizes[r.Intn(len(sizes))]
		if trial%10 == 0 {
			m, n, k = 300, 3100, 40 // past nc as well
		}
		ta, tb := r.Intn(2) == 1, r.Intn(2) == 1
		alpha, beta := float32(r.NormFloat64()), []float32{0, 1, 0.5}[r.Intn(3)]
		ra, ca := m, k
		if ta {
			ra, ca = k, m
		}
		rb, cb := k, n
		if tb {
			rb, cb = n, k
		}
		lda, ldb, ldc := ca+r.Intn(3), cb+r.Intn(3), n+r.Intn(3)
		a, b := randSlice(r, ra*lda), randSlice(r, rb*ldb)
		c := randSlice(r, m*ldc)
		want := append([]float32(nil), c...)
		SgemmNaive(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, want, ldc)
		SgemmGo(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		for i := 0; i < m; i++ {
			for j := 0; j < ldc; j++ {
				g, w := c[i*ldc+j], want[i*ldc+j]
				tol := 1e-4 * (1 + float32(math.Sqrt(float64(k))) + float32(math.Abs(float64(w))))
				if math.Abs(float64(g-w)) > float64(tol) {
					t.Fatalf("m%d n%d k%d ta %v tb %v alpha %v beta %v: C[%d,%d] = %v, want %v", m, n, k, ta, tb, alpha, beta, i, j, g, w)
				}
			}
		}
	}
}

func TestSgemmBetaZeroClearsNaN(t *testing.T) {
	c := []float32{float32(math.NaN()), float32(math.Inf(1))}
	Sgemm(false, false, 1, 2, 1, 1, []float32{2}, 1, []float32{3, 4}, 2, 0, c, 2)
	if c[0] != 6 || c[1] != 8 {
		t.Fatalf("got %v", c)
	}
}

// TestKernelMatchesGo pins each assembly micro-kernel to the Go one, on one
// tile and on a column of three.
func TestKernelMatchesGo(t *testing.T) {
	defer use(kernels[0])
	for _, kc := range kernels {
		use(kc)
		t.Run(kc.name, testKernelMatchesGo)
	}
}

func testKernelMatchesGo(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	ldc := nr + 4
	for _, set := range []bool{false, true} {
		for _, tiles := range []int{1, 3} {
			for _, k := range []int{0, 1, 2, 3, 17, 256} {
				a, b := randSlice(r, tiles*k*mr), randSlice(r, k*nr)
				c1 := randSlice(r, tiles*mr*ldc)
				if set { // set must not read C
					for i := range c1 {
						c1[i] = float32(math.NaN())
					}
				}
				c2 := append([]float32(nil), c1...)
				kernelTiles(tiles, k, a, b, c1, ldc, set)
				for tl := 0; tl < tiles; tl++ {
					kernelGo(k, a[tl*mr*k:], b, c2[tl*mr*ldc:], ldc, set)
				}
				for i := range c1 {
					if c1[i] != c1[i] && c2[i] != c2[i] && i%ldc >= nr {
						continue // NaN past the tile on both sides: untouched
					}
					if math.IsNaN(float64(c1[i])) || math.Abs(float64(c1[i]-c2[i])) > 1e-4*(1+math.Abs(float64(c2[i]))) {
						t.Fatalf("set %v tiles %d k=%d: element %d: %v vs %v", set, tiles, k, i, c1[i], c2[i])
					}
				}
			}
		}
	}
}

// TestCopyRowsMatchesGo pins each kernel's packB row copy to the Go one.
func TestCopyRowsMatchesGo(t *testing.T) {
	defer use(kernels[0])
	r := rand.New(rand.NewSource(4))
	for _, kc := range kernels {
		use(kc)
		for _, c := range []struct{ k, lds int }{{1, 32}, {3, 32}, {17, 45}, {256, 1024}} {
			src := randSlice(r, (c.k-1)*c.lds+nr)
			got, want := make([]float32, c.k*nr), make([]float32, c.k*nr)
			copyRows(c.k, src, c.lds, got)
			copyRowsGo(c.k, src, c.lds, want)
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%s k%d lds%d: element %d: %v, want %v", kc.name, c.k, c.lds, i, got[i], want[i])
				}
			}
		}
	}
}

// TestSgemmBetaZeroIgnoresC: with beta 0 the product's first block of k
// stores C's tiles rather than adding to them, so a NaN-filled C gives the
// oracle's result on every kernel, past kc and around tile edges, both
// transposes; the padding between rows (ldc > n) stays as it was.
func TestSgemmBetaZeroIgnoresC(t *testing.T) {
	defer use(kernels[0])
	for _, kc := range kernels {
		use(kc)
		t.Run(kc.name, func(t *testing.T) {
			r := rand.New(rand.NewSource(5))
			for _, c := range []struct {
				m, n, k int
				ta, tb  bool
			}{
				{6, 32, 16, false, false}, {7, 33, 300, false, false}, {73, 65, 257, true, false},
				{40, 100, 520, false, true}, {13, 3100, 20, true, true}, {128, 128, 128, false, false},
			} {
				ra, ca, rb, cb := c.m, c.k, c.k, c.n
				if c.ta {
					ra, ca = ca, ra
				}
				if c.tb {
					rb, cb = cb, rb
				}
				ldc := c.n + 2
				a, b := randSlice(r, ra*ca), randSlice(r, rb*cb)
				got, want := make([]float32, c.m*ldc), make([]float32, c.m*ldc)
				for i := range got {
					got[i] = float32(math.NaN())
				}
				SgemmNaive(c.ta, c.tb, c.m, c.n, c.k, 0.5, a, ca, b, cb, 0, want, ldc)
				SgemmGo(c.ta, c.tb, c.m, c.n, c.k, 0.5, a, ca, b, cb, 0, got, ldc)
				for i := 0; i < c.m; i++ {
					for j := 0; j < ldc; j++ {
						g, w := got[i*ldc+j], want[i*ldc+j]
						if j >= c.n {
							if !math.IsNaN(float64(g)) {
								t.Fatalf("%+v: padding C[%d,%d] written: %v", c, i, j, g)
							}
							continue
						}
						tol := 1e-4 * (1 + math.Sqrt(float64(c.k)) + math.Abs(float64(w)))
						if math.IsNaN(float64(g)) || math.Abs(float64(g-w)) > tol {
							t.Fatalf("%+v: C[%d,%d] = %v, want %v", c, i, j, g, w)
						}
					}
				}
			}
		})
	}
}

// BenchmarkSgemm reports GFLOP/s of square row-major products.
func BenchmarkSgemm(b *testing.B) {
	for _, n := range []int{256, 512, 1024} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			r := rand.New(rand.NewSource(3))
			x, y, z := randSlice(r, n*n), randSlice(r, n*n), make([]float32, n*n)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				Sgemm(false, false, n, n, n, 1, x, n, y, n, 0, z, n)
			}
			b.ReportMetric(2*float64(n)*float64(n)*float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// TestSgemmGoSameOnAnyCores: the Go kernels' result is bit for bit the same
// whatever GOMAXPROCS (and so however C is cut between workers), rows or
// columns the longer side.
func TestSgemmGoSameOnAnyCores(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	r := rand.New(rand.NewSource(7))
	for _, c := range []struct {
		m, n, k int
		ta, tb  bool
		beta    float32
	}{{301, 190, 400, false, false, 0}, {190, 301, 400, true, true, 0.5}, {97, 650, 70, false, true, 1}, {650, 97, 70, true, false, 0}} {
		ra, ca, rb, cb := c.m, c.k, c.k, c.n
		if c.ta {
			ra, ca = ca, ra
		}
		if c.tb {
			rb, cb = cb, rb
		}
		a, b, c0 := randSlice(r, ra*ca), randSlice(r, rb*cb), randSlice(r, c.m*c.n)
		var want []float32
		for _, procs := range []int{1, 2, 3, 5} {
			runtime.GOMAXPROCS(procs)
			got := append([]float32(nil), c0...)
			SgemmGo(c.ta, c.tb, c.m, c.n, c.k, 0.7, a, ca, b, cb, c.beta, got, c.n)
			if want == nil {
				want = got
				continue
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%+v GOMAXPROCS %d: C[%d] = %v, on one core %v", c, procs, i, got[i], want[i])
				}
			}
		}
	}
}
