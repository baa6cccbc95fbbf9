package tensor

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
)

// TestSgemmTinyAgainstNaive holds sgemmTiny, with the vector path and
// without, to the oracle on the products it takes (m·n·k ≤ tinyGemm, and
// tinyGemmVec for the vector path): both transposes, strides wider than
// the matrix, alpha and beta, column counts around the vector width (8),
// scratch on the stack and from the pool.
func TestSgemmTinyAgainstNaive(t *testing.T) {
	defer func(v bool) { hasVMath = v }(hasVMath)
	paths := []bool{false}
	if hasVMath {
		paths = append(paths, true)
	}
	for _, vec := range paths {
		hasVMath = vec
		r := rand.New(rand.NewSource(11))
		for _, s := range [][3]int{{8, 8, 8}, {1, 8, 1}, {3, 9, 7}, {2, 15, 16}, {4, 16, 16}, {1, 17, 60}, {5, 24, 8}, {6, 7, 3}, {1, 1, 1}, {2, 33, 15}, {2, 16, 200}, {32, 16, 16}, {4, 64, 32}, {1, 9, 900}} {
			m, n, k := s[0], s[1], s[2]
			for _, ta := range []bool{false, true} {
				for _, tb := range []bool{false, true} {
					for _, alpha := range []float32{1, -0.75} {
						t.Run(fmt.Sprintf("vec=%v/%dx%dx%d/ta=%v,tb=%v,alpha=%v", vec, m, n, k, ta, tb, alpha), func(t *testing.T) {
							ra, ca, rb, cb := m, k, k, n
							if ta {
								ra, ca = k, m
							}
							if tb {
								rb, cb = n, k
							}
							lda, ldb, ldc := ca+r.Intn(3), cb+r.Intn(3), n+r.Intn(3)
							a, b := randSlice(r, ra*lda), randSlice(r, rb*ldb)
							c := randSlice(r, m*ldc)
							want := append([]float32(nil), c...)
							SgemmNaive(ta, tb, m, n, k, alpha, a, lda, b, ldb, 0.5, want, ldc)
							SgemmGo(ta, tb, m, n, k, alpha, a, lda, b, ldb, 0.5, c, ldc)
							for i := range c {
								if tol := 1e-5 * (1 + math.Sqrt(float64(k)) + math.Abs(float64(want[i]))); math.Abs(float64(c[i]-want[i])) > tol {
									t.Fatalf("C[%d] = %v, want %v", i, c[i], want[i])
								}
							}
						})
					}
				}
			}
		}
	}
}

// BenchmarkSgemmTiny times attention's per-head products (8×8×8, each
// transpose) with the vector path and without.
func BenchmarkSgemmTiny(b *testing.B) {
	defer func(v bool) { hasVMath = v }(hasVMath)
	r := rand.New(rand.NewSource(12))
	x, y, z := randSlice(r, 8*24), randSlice(r, 8*24), make([]float32, 64)
	for _, vec := range []bool{false, true} {
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}} {
			b.Run(fmt.Sprintf("vec=%v/ta=%v,tb=%v", vec, tr[0], tr[1]), func(b *testing.B) {
				hasVMath = vec && hasVMath
				for i := 0; i < b.N; i++ {
					SgemmGo(tr[0], tr[1], 8, 8, 8, 1, x, 24, y, 24, 1, z, 8)
				}
			})
		}
	}
}
