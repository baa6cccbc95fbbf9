//go:build linux

package tensor

import (
	"fmt"
	"math/rand"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkTinyVsLibrary sets sgemmTiny (the vector rows where AVX2 runs),
// the loaded library and SgemmGo (packing past the bound) side by side on small
// products around tinyGemmVec, each transpose, and reports each side's
// best time per call over three rounds in the thread's CPU time (what a
// busy machine's other processes do not inflate): tinyGemmVec is where the
// library starts to win.
func BenchmarkTinyVsLibrary(b *testing.B) {
	l := findLibrary(b)
	cpu := func() float64 {
		var ts unix.Timespec
		unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
		return float64(ts.Nano())
	}
	r := rand.New(rand.NewSource(1))
	for _, s := range [][3]int{{8, 8, 8}, {16, 8, 16}, {16, 16, 16}, {32, 16, 16}, {32, 16, 32}, {32, 32, 16}} {
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}} {
			m, n, k, ta, tb := s[0], s[1], s[2], tr[0], tr[1]
			b.Run(fmt.Sprintf("%dx%dx%d,ta=%v,tb=%v", m, n, k, ta, tb), func(b *testing.B) {
				runtime.LockOSThread() // the thread's clock is this goroutine's
				defer runtime.UnlockOSThread()
				lda, ldb := k, n
				if ta {
					lda = m
				}
				if tb {
					ldb = k
				}
				x, y, z := randSlice(r, m*k), randSlice(r, k*n), make([]float32, m*n)
				sides := []func(){
					func() { sgemmTiny(ta, tb, m, n, k, 1, x, lda, y, ldb, z, n) },
					func() { l.libSgemm(ta, tb, m, n, k, 1, x, lda, y, ldb, 1, z, n) },
					func() { SgemmGo(ta, tb, m, n, k, 1, x, lda, y, ldb, 1, z, n) },
				}
				reps := 20_000_000/(m*n*k) + 1000
				best := make([]float64, len(sides))
				for i := 0; i < b.N; i++ {
					for round := 0; round < 3; round++ {
						for s, f := range sides {
							t := cpu()
							for j := 0; j < reps; j++ {
								f()
							}
							if d := (cpu() - t) / float64(reps); round == 0 || d < best[s] {
								best[s] = d
							}
						}
					}
				}
				b.ReportMetric(best[0], "tiny-ns")
				b.ReportMetric(best[1], l.vendor+"-ns")
				b.ReportMetric(best[2], "SgemmGo-ns")
				b.ReportMetric(best[0]/best[1], "tiny/"+l.vendor)
			})
		}
	}
}
