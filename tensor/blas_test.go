package tensor

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"os"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ebitengine/purego"
)

// findLibrary loads the optimized BLAS the machine has, whatever
// GRAPHPIPE_BLAS says, or skips saying why (fails where CI requires one).
func findLibrary(t testing.TB) *blasLib {
	t.Helper()
	for _, vd := range blasVendors {
		h, path, err := openVendor(vd)
		if err != nil {
			continue
		}
		l, err := bindBLAS(h, vd, path, vd.files)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if os.Getenv("GRAPHPIPE_REQUIRE_BLAS") != "" {
		t.Fatal("GRAPHPIPE_REQUIRE_BLAS is set and no optimized BLAS is installed (Debian: libopenblas0-pthread)")
	}
	t.Skip("no optimized BLAS installed (Debian: libopenblas0-pthread): only the Go kernels run here")
	return nil
}

// TestBLASAgainstGo holds the loaded library to the Go kernels, the oracle,
// on random shapes: tiny ones, ones around the Go kernels' tiles and
// blocks, both transposes, strides wider than the matrix, alpha and beta
// (beta 0 over NaNs, which must not survive).
func TestBLASAgainstGo(t *testing.T) {
	l := findLibrary(t)
	r := rand.New(rand.NewSource(4))
	sizes := []int{1, 2, 3, 5, 6, 7, 16, 17, 33, 72, 73, 130, 257}
	for trial := 0; trial < 200; trial++ {
		m, n, k := sizes[r.Intn(len(sizes))], sizes[r.Intn(len(sizes))], sizes[r.Intn(len(sizes))]
		if trial%25 == 0 {
			m, n, k = 300, 700, 520
		}
		ta, tb := r.Intn(2) == 1, r.Intn(2) == 1
		alpha, beta := []float32{1, -0.5, float32(r.NormFloat64())}[r.Intn(3)], []float32{0, 1, 0.5}[r.Intn(3)]
		ra, ca := m, k
		if ta {
			ra, ca = k, m
		}
		rb, cb := k, n
		if tb {
			rb, cb = n, k
		}
		lda, ldb, ldc := ca+r.Intn(4), cb+r.Intn(4), n+r.Intn(4)
		a, b := randSlice(r, ra*lda), randSlice(r, rb*ldb)
		c := randSlice(r, m*ldc)
		if beta == 0 {
			c[r.Intn(len(c))] = float32(math.NaN())
		}
		want := append([]float32(nil), c...)
		SgemmGo(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, want, ldc)
		l.libSgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		for i := range c {
			g, w := float64(c[i]), float64(want[i])
			if math.IsNaN(w) && math.IsNaN(g) { // past a row's end, untouched
				continue
			}
			if tol := 1e-5 * (math.Sqrt(float64(k)) + math.Abs(w)) * (1 + math.Abs(float64(alpha))); !(math.Abs(g-w) <= tol) {
				t.Fatalf("%s: m%d n%d k%d ta %v tb %v lda %d ldb %d ldc %d alpha %v beta %v: C[%d] = %v, the Go kernels %v",
					l.vendor, m, n, k, ta, tb, lda, ldb, ldc, alpha, beta, i, g, w)
			}
		}
	}
}

// TestSgemmUsesLibrary: with a library loaded, Sgemm's products past the
// tiny ones are the library's bit for bit, and the tiny ones the Go kernels'.
func TestSgemmUsesLibrary(t *testing.T) {
	if BLAS().Name == "go" {
		t.Skipf("Sgemm runs the Go kernels here: %s", BLAS().Why)
	}
	l := library()
	r := rand.New(rand.NewSource(5))
	for _, s := range [][3]int{{64, 48, 40}, {5, 6, 7}} {
		m, n, k := s[0], s[1], s[2]
		a, b := randSlice(r, m*k), randSlice(r, k*n)
		got, lib, goK := make([]float32, m*n), make([]float32, m*n), make([]float32, m*n)
		Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, got, n)
		l.libSgemm(false, false, m, n, k, 1, a, k, b, n, 0, lib, n)
		SgemmGo(false, false, m, n, k, 1, a, k, b, n, 0, goK, n)
		want := lib
		if isTiny(m, n, k) {
			want = goK
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%dx%dx%d: Sgemm's C[%d] = %v, want %v", m, n, k, i, got[i], want[i])
			}
		}
	}
}

// TestBLASRunsOneThread: the library computes each call on the calling
// thread (asked of the library itself), whatever GOMAXPROCS, and BLAS
// reports GOMAXPROCS, what a large product is split over.
func TestBLASRunsOneThread(t *testing.T) {
	l := findLibrary(t)
	if l.vendor != "openblas" {
		t.Skipf("%s: only OpenBLAS's count is read back here", l.vendor)
	}
	h, _, err := openVendor(blasVendors[0])
	if err != nil {
		t.Fatal(err)
	}
	var get func() int32
	purego.RegisterLibFunc(&get, h, "openblas_get_num_threads")
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	a := make([]float32, 64*64)
	for _, procs := range []int{1, 2, 3} {
		runtime.GOMAXPROCS(procs)
		l.libSgemm(false, false, 64, 64, 64, 1, a, 64, a, 64, 0, make([]float32, 64*64), 64)
		if n := get(); n != 1 {
			t.Fatalf("GOMAXPROCS %d: OpenBLAS runs %d threads", procs, n)
		}
		if BLAS().Name == "openblas" && BLAS().Threads != procs {
			t.Fatalf("GOMAXPROCS %d: BLAS says %d threads", procs, BLAS().Threads)
		}
	}
}

// TestLoadBLASChoices: "go" loads nothing; a path that is no library, or a
// library without cblas_sgemm, is a BLASLoadError naming the file and the
// symbol.
func TestLoadBLASChoices(t *testing.T) {
	t.Setenv(BLASEnv, "go")
	if l, err := loadBLAS(); l != nil || err != nil {
		t.Fatalf("GRAPHPIPE_BLAS=go: %v, %v", l, err)
	}
	t.Setenv(BLASEnv, "/nonexistent/libopenblas.so.0")
	_, err := loadBLAS()
	var le *BLASLoadError
	if !errors.As(err, &le) || le.Symbol != "" || !strings.Contains(err.Error(), "/nonexistent/libopenblas.so.0") {
		t.Fatalf("a missing file: %v", err)
	}
	t.Setenv(BLASEnv, "libc.so.6")
	_, err = loadBLAS()
	if !errors.As(err, &le) || le.Symbol != "cblas_sgemm" || !strings.Contains(err.Error(), "libc.so.6") {
		t.Fatalf("a library without cblas_sgemm: %v", err)
	}
}

func TestBLASInfoString(t *testing.T) {
	for _, c := range []struct {
		b    BLASInfo
		want string
	}{
		{BLASInfo{Name: "go", Why: "GRAPHPIPE_BLAS=go"}, "go kernels (GRAPHPIPE_BLAS=go)"},
		{BLASInfo{Name: "openblas", Path: "libopenblas.so.0", Version: "OpenBLAS 0.3.21", Threads: 2}, "openblas OpenBLAS 0.3.21 (libopenblas.so.0, 2 threads)"},
	} {
		if got := c.b.String(); got != c.want {
			t.Errorf("%#v: %q, want %q", c.b, got, c.want)
		}
	}
}

// BenchmarkSgemmVsBLAS times the Go kernels and the loaded library on the
// same matrices in one run, called in turn product by product (a shared
// machine's load falls on both alike) until each has had 3 seconds, and
// reports each side's median rate and their ratio (Go kernels / library).
func BenchmarkSgemmVsBLAS(b *testing.B) {
	l := findLibrary(b)
	for _, n := range []int{256, 512, 1024, 2048} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			r := rand.New(rand.NewSource(3))
			x, y, z := randSlice(r, n*n), randSlice(r, n*n), make([]float32, n*n)
			sides := []func(){
				func() { SgemmGo(false, false, n, n, n, 1, x, n, y, n, 0, z, n) },
				func() { l.libSgemm(false, false, n, n, n, 1, x, n, y, n, 0, z, n) },
			}
			times := [2][]float64{}
			for i := 0; i < b.N; i++ {
				for _, f := range sides {
					f() // warm up
				}
				for start := time.Now(); time.Since(start) < 6*time.Second || len(times[0]) < 5; {
					for s, f := range sides {
						t := time.Now()
						f()
						times[s] = append(times[s], time.Since(t).Seconds())
					}
				}
			}
			flop := 2 * float64(n) * float64(n) * float64(n) / 1e9
			goRate, libRate := flop/medianOf(times[0]), flop/medianOf(times[1])
			b.ReportMetric(goRate, "go-GFLOP/s")
			b.ReportMetric(libRate, l.vendor+"-GFLOP/s")
			b.ReportMetric(goRate/libRate, "go/"+l.vendor)
		})
	}
}

func medianOf(x []float64) float64 {
	s := append([]float64(nil), x...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// TestSgemmBatched: a batch of strided products equals each product on the
// Go kernels, whichever path runs (the library's batched call where it has
// one; Sgemm in turn otherwise), transposes and strides included.
func TestSgemmBatched(t *testing.T) {
	r := rand.New(rand.NewSource(6))
	for _, c := range []struct {
		ta, tb  bool
		m, n, k int
	}{{false, false, 17, 33, 20}, {true, false, 40, 9, 31}, {false, true, 12, 12, 64}, {true, true, 3, 5, 2}} {
		const batch = 5
		sa, sb, sc := c.m*c.k+3, c.k*c.n+1, c.m*c.n+2
		lda, ldb := c.k, c.n
		if c.ta {
			lda = c.m
		}
		if c.tb {
			ldb = c.k
		}
		a, b := randSlice(r, batch*sa), randSlice(r, batch*sb)
		got := randSlice(r, batch*sc)
		want := append([]float32(nil), got...)
		SgemmBatched(c.ta, c.tb, c.m, c.n, c.k, 0.5, a, lda, sa, b, ldb, sb, 1, got, c.n, sc, batch)
		for i := 0; i < batch; i++ {
			SgemmGo(c.ta, c.tb, c.m, c.n, c.k, 0.5, a[i*sa:], lda, b[i*sb:], ldb, 1, want[i*sc:], c.n)
		}
		for i := range got {
			if math.Abs(float64(got[i]-want[i])) > 1e-4*(1+math.Abs(float64(want[i]))) {
				t.Fatalf("%+v: C[%d] = %v, the Go kernels %v", c, i, got[i], want[i])
			}
		}
	}
}
