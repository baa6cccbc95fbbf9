package tensor

import (
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestSplitGemm: a product cut into parts (rows or columns, both
// transposes, strides wider than the matrix, sizes not a multiple of
// splitAlign) equals the uncut product bit for bit, the parts and the
// whole computed by SgemmNaive (each element's sum in order).
func TestSplitGemm(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	for _, c := range []struct {
		m, n, k, parts int
	}{{100, 37, 20, 2}, {37, 100, 20, 3}, {200, 200, 9, 4}, {15, 9, 4, 2}, {33, 70, 5, 7}, {64, 64, 8, 1}} {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				name := fmt.Sprintf("%dx%dx%d/%d/ta=%v,tb=%v", c.m, c.n, c.k, c.parts, ta, tb)
				t.Run(name, func(t *testing.T) {
					m, n, k := c.m, c.n, c.k
					lda, ldb, ldc := k+3, n+1, n+2
					ra, rb := m, k
					if ta {
						lda, ra = m+3, k
					}
					if tb {
						ldb, rb = k+1, n
					}
					a, b := randSlice(r, ra*lda), randSlice(r, rb*ldb)
					got := randSlice(r, m*ldc)
					want := append([]float32(nil), got...)
					SgemmNaive(ta, tb, m, n, k, 0.5, a, lda, b, ldb, 1, want, ldc)
					var calls atomic.Int32
					splitGemm(c.parts, ta, tb, m, n, k, func(ta, tb bool, pm, pn, pk, ao, bo, co int) {
						calls.Add(1)
						SgemmNaive(ta, tb, pm, pn, pk, 0.5, a[ao:], lda, b[bo:], ldb, 1, got[co:], ldc)
					}, lda, ldb, ldc)
					for i := range got {
						if got[i] != want[i] {
							t.Fatalf("C[%d] = %v, uncut %v", i, got[i], want[i])
						}
					}
					if want := (max(m, n) + roundUp((max(m, n)+c.parts-1)/c.parts, splitAlign) - 1) / roundUp((max(m, n)+c.parts-1)/c.parts, splitAlign); int(calls.Load()) != want {
						t.Fatalf("%d calls, want %d", calls.Load(), want)
					}
				})
			}
		}
	}
}

// TestEachRun: every index in exactly one run, whatever the parts.
func TestEachRun(t *testing.T) {
	for _, c := range [][2]int{{1, 1}, {3, 10}, {4, 4}, {7, 3}, {2, 9}, {0, 5}} {
		parts, count := c[0], c[1]
		seen := make([]int32, count)
		done := make(chan [2]int, count+1)
		eachRun(parts, count, func(lo, hi int) { done <- [2]int{lo, hi} })
		close(done)
		for r := range done {
			for i := r[0]; i < r[1]; i++ {
				seen[i]++
			}
		}
		for i, s := range seen {
			if s != 1 {
				t.Fatalf("parts %d count %d: index %d in %d runs", parts, count, i, s)
			}
		}
	}
}

// TestSgemmSplitsOnLibrary: past splitFlops, the library's product cut
// over GOMAXPROCS goroutines agrees with the Go kernels (both transposes).
func TestSgemmSplitsOnLibrary(t *testing.T) {
	l := findLibrary(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(3))
	defer splitFlops.Store(splitFlops.Load())
	splitFlops.Store(1) // every product cut
	r := rand.New(rand.NewSource(8))
	for _, s := range [][3]int{{97, 40, 33}, {40, 97, 33}, {130, 130, 64}} {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				m, n, k := s[0], s[1], s[2]
				lda, ldb := k, n
				if ta {
					lda = m
				}
				if tb {
					ldb = k
				}
				a, b := randSlice(r, m*k), randSlice(r, k*n)
				got, want := make([]float32, m*n), make([]float32, m*n)
				l.libSgemm(ta, tb, m, n, k, 1, a, lda, b, ldb, 0, got, n)
				SgemmGo(ta, tb, m, n, k, 1, a, lda, b, ldb, 0, want, n)
				for i := range got {
					if tol := 1e-5 * (math.Sqrt(float64(k)) + math.Abs(float64(want[i]))); math.Abs(float64(got[i]-want[i])) > tol {
						t.Fatalf("%v ta %v tb %v: C[%d] = %v, the Go kernels %v", s, ta, tb, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// BenchmarkSplitThreshold measures where cutting a library product over
// the cores starts to pay: for each size, one call on one core and the
// product split over GOMAXPROCS goroutines, called in turn, and the Go
// kernels beside them; it reports the split's time over the single call's
// (below 1: splitting pays). defaultSplitFlops comes from it (run with
// GOMAXPROCS=2).
func BenchmarkSplitThreshold(b *testing.B) {
	l := findLibrary(b)
	defer splitFlops.Store(splitFlops.Load())
	for _, s := range [][5]int{
		{0, 0, 64, 64, 64}, {0, 1, 128, 96, 32}, {0, 0, 96, 96, 96}, {0, 0, 128, 128, 128}, {0, 1, 256, 128, 128},
		{0, 0, 160, 160, 160}, {0, 0, 192, 192, 192}, {1, 0, 192, 192, 192}, {0, 0, 256, 256, 256}, {0, 0, 384, 384, 384},
	} {
		ta, tb, m, n, k := s[0] == 1, s[1] == 1, s[2], s[3], s[4]
		b.Run(fmt.Sprintf("%dx%dx%d,ta=%v,tb=%v", m, n, k, ta, tb), func(b *testing.B) {
			r := rand.New(rand.NewSource(9))
			lda, ldb := k, n
			if ta {
				lda = m
			}
			if tb {
				ldb = k
			}
			x, y, z := randSlice(r, m*k), randSlice(r, k*n), make([]float32, m*n)
			reps := max(1, 1<<22/(m*n*k))
			sides := []func(){
				func() { splitFlops.Store(math.Inf(1)); l.libSgemm(ta, tb, m, n, k, 1, x, lda, y, ldb, 0, z, n) },
				func() { splitFlops.Store(0); l.libSgemm(ta, tb, m, n, k, 1, x, lda, y, ldb, 0, z, n) },
				func() { SgemmGo(ta, tb, m, n, k, 1, x, lda, y, ldb, 0, z, n) },
			}
			times := make([][]float64, len(sides))
			for i := 0; i < b.N; i++ {
				for start := time.Now(); time.Since(start) < time.Second || len(times[0]) < 5; {
					for s, f := range sides {
						t := time.Now()
						for j := 0; j < reps; j++ {
							f()
						}
						times[s] = append(times[s], time.Since(t).Seconds()/float64(reps))
					}
				}
			}
			one, split, goK := medianOf(times[0]), medianOf(times[1]), medianOf(times[2])
			b.ReportMetric(one*1e6, "one-µs")
			b.ReportMetric(split*1e6, "split-µs")
			b.ReportMetric(goK*1e6, "go-µs")
			b.ReportMetric(split/one, "split/one")
		})
	}
}
