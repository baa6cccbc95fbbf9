package tensor

import (
	"fmt"
	"math"
	"os"
	"strings"
)

// BLASCheckError is a library that loaded but computes a product the Go
// kernels do not: a cblas_sgemm that does nothing, or a wrong one, would
// train silently wrong, so the library is checked once as it loads.
type BLASCheckError struct {
	Lib, Path string
	Case      string // the product, in words
	Index     int    // the first element of C that disagrees
	Got, Want float32
}

func (e *BLASCheckError) Error() string {
	return fmt.Sprintf("blas: %s (%s) computes a wrong product: %s: C[%d] = %g, the Go kernels give %g",
		e.Lib, e.Path, e.Case, e.Index, e.Got, e.Want)
}

// checkCase is one product the check computes.
type checkCase struct {
	m, n, k     int
	ta, tb      bool
	alpha, beta float32
	batch       int // > 0: through cblas_sgemm_batch_strided, that many
}

func (c checkCase) String() string {
	s := fmt.Sprintf("%dx%dx%d", c.m, c.n, c.k)
	if c.ta {
		s += ", A transposed"
	}
	if c.tb {
		s += ", B transposed"
	}
	s += fmt.Sprintf(", alpha %g, beta %g", c.alpha, c.beta)
	if c.batch > 0 {
		s += fmt.Sprintf(", %d at once (cblas_sgemm_batch_strided)", c.batch)
	}
	return s
}

// checkCases cover both operands' transposes, alpha and beta, and strides
// wider than the matrices: small enough to cost microseconds at load.
var checkCases = []checkCase{
	{m: 7, n: 5, k: 3, alpha: 1},
	{m: 6, n: 9, k: 11, ta: true, tb: true, alpha: 0.5, beta: 1},
	{m: 33, n: 17, k: 20, tb: true, alpha: -1, beta: 0.25},
	{m: 12, n: 10, k: 16, ta: true, alpha: 1, beta: 0.5},
}

// check computes checkCases on l and on the Go kernels (the oracle) and
// refuses a library whose results differ beyond float32 rounding. A
// library that faults in cblas_sgemm kills the process here, at load,
// rather than in the middle of a run.
func (l *blasLib) check() error {
	cases := checkCases
	if l.sgemmStrided != nil {
		cases = append(cases[:len(cases):len(cases)], checkCase{m: 9, n: 7, k: 5, tb: true, alpha: 1, beta: 0.5, batch: 3})
	}
	for _, c := range cases {
		if err := l.checkOne(c); err != nil {
			return err
		}
	}
	return nil
}

func (l *blasLib) checkOne(c checkCase) error {
	ra, ca, rb, cb := c.m, c.k, c.k, c.n
	if c.ta {
		ra, ca = ca, ra
	}
	if c.tb {
		rb, cb = cb, rb
	}
	lda, ldb, ldc := ca+1, cb+2, c.n+3
	batch := max(c.batch, 1)
	sa, sb, sc := ra*lda, rb*ldb, c.m*ldc
	a, b, got := checkValues(batch*sa, 3), checkValues(batch*sb, 5), checkValues(batch*sc, 7)
	want := append([]float32(nil), got...)
	for i := 0; i < batch; i++ {
		SgemmGo(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a[i*sa:], lda, b[i*sb:], ldb, c.beta, want[i*sc:], ldc)
	}
	if c.batch > 0 {
		l.sgemmStrided(cblasRowMajor, cblasOp(c.ta), cblasOp(c.tb), int32(c.m), int32(c.n), int32(c.k), c.alpha,
			&a[0], int32(lda), int32(sa), &b[0], int32(ldb), int32(sb), c.beta, &got[0], int32(ldc), int32(sc), int32(batch))
	} else {
		l.sgemm(cblasRowMajor, cblasOp(c.ta), cblasOp(c.tb), int32(c.m), int32(c.n), int32(c.k), c.alpha,
			&a[0], int32(lda), &b[0], int32(ldb), c.beta, &got[0], int32(ldc))
	}
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if tol := 1e-5 * (float64(c.k) + math.Abs(w)); !(math.Abs(g-w) <= tol) {
			return &BLASCheckError{Lib: l.vendor, Path: l.path, Case: c.String(), Index: i, Got: got[i], Want: want[i]}
		}
	}
	return nil
}

// checkValues is n values in [-1, 1) that are exact in float32 and not
// all alike, from seed: products of them sum exactly, so any library's
// order of summation gives the same result.
func checkValues(n, seed int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32((i*seed+seed)%17-8) / 8
	}
	return v
}

// regularLibrary refuses a library path that is not a regular file (after
// its symbolic links): dlopen of a FIFO blocks until someone writes to it,
// and of a directory or device fails with a less clear message. A bare
// name (no slash) is looked up by the dynamic loader, not here.
func regularLibrary(path string) error {
	if !strings.ContainsRune(path, '/') {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file but %s: not a shared library", path, fileKind(fi.Mode()))
	}
	return nil
}

// fileKind names what a file that is not a regular one is.
func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return "a special file"
}
