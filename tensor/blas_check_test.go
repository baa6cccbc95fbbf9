package tensor

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeCBLAS is a cblas_sgemm in C: row-major, naive, right unless a macro
// breaks it (NOP: does nothing; ZERO: writes zeros; NOTRANS: ignores
// transA; BATCH_NOP: a cblas_sgemm_batch_strided beside it that does
// nothing).
const fakeCBLAS = `
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha,
		const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc) {
#ifdef NOP
	return;
#endif
	for (int i = 0; i < m; i++) for (int j = 0; j < n; j++) {
		float s = 0;
		for (int p = 0; p < k; p++) {
			float av = ta == 112 ? a[p*lda+i] : a[i*lda+p];
#ifdef NOTRANS
			av = a[i*lda+p];
#endif
			s += av * (tb == 112 ? b[j*ldb+p] : b[p*ldb+j]);
		}
		c[i*ldc+j] = alpha*s + (beta == 0 ? 0 : beta*c[i*ldc+j]);
#ifdef ZERO
		c[i*ldc+j] = 0;
#endif
	}
}
#ifdef BATCH_NOP
void cblas_sgemm_batch_strided(int order, int ta, int tb, int m, int n, int k, float alpha,
		const float *a, int lda, int sa, const float *b, int ldb, int sb, float beta, float *c, int ldc, int sc, int batch) {}
#endif
`

// buildFakeCBLAS compiles fakeCBLAS with the given macros into a shared
// library, or skips where there is no C compiler.
func buildFakeCBLAS(t *testing.T, name string, macros ...string) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		if os.Getenv("GRAPHPIPE_REQUIRE_BLAS") != "" {
			t.Fatal("no C compiler (cc) to build a fake CBLAS with")
		}
		t.Skip("no C compiler (cc) to build a fake CBLAS with")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "cblas.c")
	if err := os.WriteFile(src, []byte(fakeCBLAS), 0o644); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "lib"+name+".so")
	args := []string{"-shared", "-fPIC", "-O0", "-o", lib, src}
	for _, m := range macros {
		args = append(args, "-D"+m)
	}
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	return lib
}

// TestLoadBLASChecksProducts: a library whose cblas_sgemm does nothing,
// writes zeros or ignores a transpose loads no more: a *BLASCheckError
// naming the library and the product (it trained silently wrong before);
// a right one, the reference-like naive C, loads.
func TestLoadBLASChecksProducts(t *testing.T) {
	good := buildFakeCBLAS(t, "good")
	t.Setenv(BLASEnv, good)
	l, err := loadBLAS()
	if err != nil || l == nil || l.path != good {
		t.Fatalf("a right library: %v, %v", l, err)
	}
	for _, tc := range []struct {
		name, macro, product string
	}{
		{"nop", "NOP", "7x5x3"},
		{"zero", "ZERO", "7x5x3"},
		{"notrans", "NOTRANS", "A transposed"},
		{"batchnop", "BATCH_NOP", "cblas_sgemm_batch_strided"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lib := buildFakeCBLAS(t, tc.name, tc.macro)
			t.Setenv(BLASEnv, lib)
			l, err := loadBLAS()
			var ce *BLASCheckError
			if l != nil || !errors.As(err, &ce) || ce.Path != lib || !strings.Contains(err.Error(), lib) || !strings.Contains(err.Error(), tc.product) {
				t.Fatalf("got %v, %v; want a BLASCheckError naming %s and %q", l, err, lib, tc.product)
			}
		})
	}
}

// TestLoadBLASRefusesNonRegular: a FIFO (dlopen blocked on it for ever)
// and a directory are refused at once, naming the path.
func TestLoadBLASRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "libfifo.so")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, dir} {
		t.Setenv(BLASEnv, path)
		done := make(chan error, 1)
		go func() { _, err := loadBLAS(); done <- err }()
		select {
		case err := <-done:
			var le *BLASLoadError
			if !errors.As(err, &le) || !strings.Contains(err.Error(), "not a regular file") || !strings.Contains(err.Error(), path) {
				t.Fatalf("%s: %v, want a BLASLoadError saying it is not a regular file", path, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: loading hangs", path)
		}
	}
}
