package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/ebitengine/purego"
)

// LoadError is a CUDA library that could not be opened or lacks a symbol.
type LoadError struct {
	Lib   string   // libcuda, libcublas or libnvrtc
	What  string   // what the library is for
	Tried []string // file names tried, in order
	Err   error
}

func (e *LoadError) Error() string {
	return fmt.Sprintf("cuda: cannot load %s (%s); tried %s: %v", e.Lib, e.What, strings.Join(e.Tried, ", "), e.Err)
}

func (e *LoadError) Unwrap() error { return e.Err }

// library says where to look for one shared library.
type library struct {
	name  string   // libcuda
	what  string   // the NVIDIA driver
	env   string   // variable naming a file to use instead
	files []string // sonames, newest first
	// more lists directories searched after the toolkit's (nil: none);
	// only those that exist are tried
	more func() []string
}

var (
	libCUDA   = library{name: "libcuda", what: "the NVIDIA driver", env: "GRAPHPIPE_LIBCUDA", files: []string{"libcuda.so.1", "libcuda.so"}}
	libCUBLAS = library{name: "libcublas", what: "cuBLAS, from the CUDA toolkit", env: "GRAPHPIPE_LIBCUBLAS", files: []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so"}}
	libNVRTC  = library{name: "libnvrtc", what: "NVRTC, from the CUDA toolkit", env: "GRAPHPIPE_LIBNVRTC", files: []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}}
)

// candidates lists the paths to try for l: the override alone when set,
// else each soname on the loader's path, then in the toolkit directories,
// then in l's more directories that exist.
func (l library) candidates() []string {
	if p := os.Getenv(l.env); p != "" {
		return []string{p}
	}
	var dirs []string
	for _, v := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if d := os.Getenv(v); d != "" {
			dirs = append(dirs, filepath.Join(d, "lib64"))
		}
	}
	dirs = append(dirs, "/usr/local/cuda/lib64")
	if l.more != nil {
		for _, d := range l.more() {
			if st, err := os.Stat(d); err == nil && st.IsDir() {
				dirs = append(dirs, d)
			}
		}
	}
	out := append([]string(nil), l.files...)
	for _, d := range dirs {
		for _, f := range l.files {
			if filepath.IsAbs(f) {
				continue
			}
			out = append(out, filepath.Join(d, f))
		}
	}
	return out
}

// open dlopens the first candidate that loads.
func (l library) open() (uintptr, error) {
	h, _, err := l.openPath()
	return h, err
}

// openPath is open, also returning the candidate that loaded.
func (l library) openPath() (uintptr, string, error) {
	tried := l.candidates()
	var first error
	for _, p := range tried {
		h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return h, p, nil
		}
		if first == nil {
			first = err
		}
	}
	return 0, "", &LoadError{Lib: l.name, What: l.what, Tried: tried, Err: first}
}

// bind resolves each symbol into its function pointer; names list
// alternatives (the first present wins), as CUDA versions rename calls.
func (l library) bind(h uintptr, fns []binding) error {
	for _, b := range fns {
		var found bool
		for _, name := range b.names {
			if _, err := purego.Dlsym(h, name); err == nil {
				purego.RegisterLibFunc(b.fn, h, name)
				found = true
				break
			}
		}
		if !found {
			return &LoadError{Lib: l.name, What: l.what, Tried: l.candidates(), Err: fmt.Errorf("symbol %s not found", strings.Join(b.names, " or "))}
		}
	}
	return nil
}

type binding struct {
	fn    any
	names []string
}

func bind(fn any, names ...string) binding { return binding{fn, names} }

var (
	loadOnce sync.Once
	loadErr  error
)

// Load opens the three libraries and resolves their symbols, once per
// process; later calls return the first call's result.
func Load() error {
	loadOnce.Do(func() { loadErr = load() })
	return loadErr
}

func load() error {
	for _, s := range []struct {
		lib library
		fns []binding
	}{{libCUDA, driverBindings()}, {libCUBLAS, cublasBindings()}, {libNVRTC, nvrtcBindings()}} {
		h, err := s.lib.open()
		if err != nil {
			return err
		}
		if err := s.lib.bind(h, s.fns); err != nil {
			return err
		}
	}
	if r := cuInit(0); r != 0 {
		return &Error{Call: "cuInit", Code: int(r), Name: errName(r)}
	}
	return nil
}

// Available says whether a CUDA device can be used, and if not, why.
func Available() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	var n int32
	if err := check("cuDeviceGetCount", cuDeviceGetCount(&n)); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, errors.New("cuda: the driver loaded but sees no device")
	}
	return int(n), nil
}
