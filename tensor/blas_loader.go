package tensor

import (
	"fmt"
	"os"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// BLASEnv names the BLAS library Sgemm uses: unset (or "auto"), the first
// optimized CBLAS found by the sonames of blasVendors; "go", the Go kernels
// alone; a path, that library (any CBLAS, the reference one included).
const BLASEnv = "GRAPHPIPE_BLAS"

// BLASLoadError is a BLAS library that could not be opened or lacks a
// symbol Sgemm needs.
type BLASLoadError struct {
	Lib    string   // the vendor ("openblas", "blis", "mkl") or the path named
	Symbol string   // the symbol missing, "" when no file opened
	Tried  []string // the files tried, in order
	Err    error
}

func (e *BLASLoadError) Error() string {
	if e.Symbol != "" {
		return fmt.Sprintf("blas: %s (%s) has no %s: %v", e.Lib, strings.Join(e.Tried, ", "), e.Symbol, e.Err)
	}
	return fmt.Sprintf("blas: cannot load %s; tried %s: %v", e.Lib, strings.Join(e.Tried, ", "), e.Err)
}

func (e *BLASLoadError) Unwrap() error { return e.Err }

// blasVendor is an optimized CBLAS looked for by its sonames, with the call
// that sets its thread count and the one that says its version.
type blasVendor struct {
	name    string   // openblas
	files   []string // sonames, newest first
	threads string   // void f(int): the library's thread count
	version string   // const char *f(void), or MKL's void f(char *, int)
}

// blasVendors are tried in this order. The reference BLAS (libblas.so.3,
// libcblas.so.3) is never looked for: it is slower than the Go kernels,
// and runs only when GRAPHPIPE_BLAS names it.
var blasVendors = []blasVendor{
	{"openblas", []string{"libopenblas.so.0", "libopenblas.so", "libopenblasp.so.0"}, "openblas_set_num_threads", "openblas_get_config"},
	{"blis", []string{"libblis.so.4", "libblis.so.3", "libblis-mt.so.4", "libblis.so"}, "bli_thread_set_num_threads", "bli_info_get_version_str"},
	{"mkl", []string{"libmkl_rt.so.2", "libmkl_rt.so.1", "libmkl_rt.so"}, "MKL_Set_Num_Threads", "MKL_Get_Version_String"},
}

// blasLib is a loaded CBLAS: its functions bound, nil where it lacks one.
type blasLib struct {
	vendor, path, version string

	// cblas_sgemm(order, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	sgemm func(order, transA, transB, m, n, k int32, alpha float32, a *float32, lda int32, b *float32, ldb int32, beta float32, c *float32, ldc int32)
	// cblas_sgemm_batch_strided (MKL, newer OpenBLAS): the same product
	// batch times, operand i at a + i·strideA and so on.
	sgemmStrided func(order, transA, transB, m, n, k int32, alpha float32, a *float32, lda, strideA int32, b *float32, ldb, strideB int32, beta float32, c *float32, ldc, strideC, batch int32)
	setThreads   func(n int32)
}

// CBLAS's enumerations.
const (
	cblasRowMajor = 101
	cblasNoTrans  = 111
	cblasTrans    = 112
)

// loadBLAS reads GRAPHPIPE_BLAS and loads what it names: (nil, nil) for the
// Go kernels, by choice or because no optimized library is installed. A
// library that loads is checked against the Go kernels (blas_check.go)
// before any product is its: a wrong one is a *BLASCheckError.
func loadBLAS() (*blasLib, error) {
	l, err := openBLAS()
	if err != nil || l == nil {
		return nil, err
	}
	if err := l.check(); err != nil {
		return nil, err
	}
	return l, nil
}

// openBLAS opens and binds the library GRAPHPIPE_BLAS names, or finds one.
func openBLAS() (*blasLib, error) {
	switch v := os.Getenv(BLASEnv); v {
	case "go":
		return nil, nil
	case "", "auto":
		for _, vd := range blasVendors {
			h, path, err := openVendor(vd)
			if err != nil {
				continue // not installed
			}
			return bindBLAS(h, vd, path, vd.files)
		}
		return nil, nil
	default:
		if err := regularLibrary(v); err != nil {
			return nil, &BLASLoadError{Lib: v, Tried: []string{v}, Err: err}
		}
		var h uintptr
		var err error
		pinCoreType(func() { h, err = purego.Dlopen(v, purego.RTLD_NOW|purego.RTLD_LOCAL) })
		if err != nil {
			return nil, &BLASLoadError{Lib: v, Tried: []string{v}, Err: err}
		}
		return bindBLAS(h, vendorOf(h), v, []string{v})
	}
}

// openFirst dlopens the first of files that loads.
func openFirst(files []string) (uintptr, string, error) {
	var first error
	for _, f := range files {
		h, err := purego.Dlopen(f, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err == nil {
			return h, f, nil
		}
		if first == nil {
			first = err
		}
	}
	return 0, "", first
}

// openVendor opens vd's first soname that loads.
func openVendor(vd blasVendor) (h uintptr, path string, err error) {
	if vd.name == "openblas" {
		pinCoreType(func() { h, path, err = openFirst(vd.files) })
		return h, path, err
	}
	return openFirst(vd.files)
}

// pinCoreType runs open (OpenBLAS's dlopen) with OPENBLAS_CORETYPE set to
// the kernels this CPU runs, unless the user set it: OpenBLAS picks its
// kernels once, as it loads, from the CPU's model number, and one newer
// than its release falls back to its SSE3 kernels (0.3.21 takes a Sapphire
// Rapids for a Prescott and runs 4-8x slower than the Go kernels). The
// variable is unset again after, so child processes see the user's
// environment.
func pinCoreType(open func()) {
	const env = "OPENBLAS_CORETYPE"
	core := coreType()
	if _, set := os.LookupEnv(env); set || core == "" {
		open()
		return
	}
	os.Setenv(env, core)
	defer os.Unsetenv(env)
	open()
}

// vendorOf tells a library named by path by the thread call it exports; a
// CBLAS with none of them (the reference one) is "cblas", its threads its own.
func vendorOf(h uintptr) blasVendor {
	for _, vd := range blasVendors {
		if _, err := purego.Dlsym(h, vd.threads); err == nil {
			return vd
		}
	}
	return blasVendor{name: "cblas"}
}

// bindBLAS resolves the symbols of the library open at h.
func bindBLAS(h uintptr, vd blasVendor, path string, tried []string) (*blasLib, error) {
	l := &blasLib{vendor: vd.name, path: path}
	if _, err := purego.Dlsym(h, "cblas_sgemm"); err != nil {
		return nil, &BLASLoadError{Lib: vd.name, Symbol: "cblas_sgemm", Tried: tried, Err: err}
	}
	purego.RegisterLibFunc(&l.sgemm, h, "cblas_sgemm")
	if _, err := purego.Dlsym(h, "cblas_sgemm_batch_strided"); err == nil {
		purego.RegisterLibFunc(&l.sgemmStrided, h, "cblas_sgemm_batch_strided")
	}
	if vd.threads != "" {
		if _, err := purego.Dlsym(h, vd.threads); err != nil {
			return nil, &BLASLoadError{Lib: vd.name, Symbol: vd.threads, Tried: tried, Err: err}
		}
		purego.RegisterLibFunc(&l.setThreads, h, vd.threads)
		l.setThreads(1) // Sgemm splits large products over goroutines itself (blas_split.go)
	}
	l.version = libVersion(h, vd)
	return l, nil
}

// libVersion is what the library says of itself ("OpenBLAS 0.3.21
// DYNAMIC_ARCH ... SkylakeX"), or "" when it says nothing.
func libVersion(h uintptr, vd blasVendor) string {
	if vd.version == "" {
		return ""
	}
	if _, err := purego.Dlsym(h, vd.version); err != nil {
		return ""
	}
	if vd.name == "mkl" {
		var f func(buf *byte, n int32)
		purego.RegisterLibFunc(&f, h, vd.version)
		buf := make([]byte, 256)
		f(&buf[0], int32(len(buf)))
		return cString(buf)
	}
	var f func() *byte
	purego.RegisterLibFunc(&f, h, vd.version)
	return strings.TrimSpace(goString(f()))
}

// goString copies the NUL-terminated C string at p (at most 1 KiB of it).
func goString(p *byte) string {
	var b []byte
	for i := 0; p != nil && i < 1024; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

// cString is b up to its first NUL, which must come within len(b) bytes.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// OpenBLASCore is the OPENBLAS_CORETYPE graphpipe loads OpenBLAS with when
// the user has not set one ("" leaves OpenBLAS its own choice): a
// benchmark gives PyTorch's OpenBLAS the same.
func OpenBLASCore() string { return coreType() }
