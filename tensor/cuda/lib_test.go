package cuda

import (
	"errors"
	"strings"
	"testing"
)

// TestLoadErrorNamesTheLibrary: a library that cannot be opened is named,
// with what it is for and every file tried.
func TestLoadErrorNamesTheLibrary(t *testing.T) {
	t.Setenv("GRAPHPIPE_LIBCUBLAS", "/nonexistent/libcublas.so.13")
	_, err := libCUBLAS.open()
	var le *LoadError
	if !errors.As(err, &le) || le.Lib != "libcublas" {
		t.Fatalf("got %v, want a *LoadError for libcublas", err)
	}
	for _, want := range []string{"libcublas", "cuBLAS", "/nonexistent/libcublas.so.13"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not mention %q", err, want)
		}
	}
}

// TestCandidates: without an override the sonames come first, newest
// first, then the toolkit directories.
func TestCandidates(t *testing.T) {
	t.Setenv("GRAPHPIPE_LIBNVRTC", "")
	t.Setenv("CUDA_HOME", "/opt/cuda")
	t.Setenv("CUDA_PATH", "")
	got := libNVRTC.candidates()
	if got[0] != "libnvrtc.so.13" || got[1] != "libnvrtc.so.12" || got[3] != "/opt/cuda/lib64/libnvrtc.so.13" {
		t.Errorf("candidates %v", got)
	}
}

// TestAvailableWithoutDriver: on a machine without the driver, Available
// says which library is missing (and on one with it, sees a device).
func TestAvailableWithoutDriver(t *testing.T) {
	n, err := Available()
	if err == nil {
		t.Skipf("a driver is present: %d GPUs", n)
	}
	var le *LoadError
	if !errors.As(err, &le) || le.Lib != "libcuda" {
		t.Errorf("got %v, want libcuda named", err)
	}
}
