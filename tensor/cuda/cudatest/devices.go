// Package cudatest opens the devices the GPU tests run on: package cuda's
// CPU emulator of the kernels (with or without its fake cuDNN), and GPU 0
// where there is one. Each emulator library is built once per test binary;
// a test skips, saying why, only where a C++ compiler or a GPU is missing.
package cudatest

import (
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// built is a library built once per test binary by build into a
// temporary directory named after prefix.
type built struct {
	once sync.Once
	lib  string
	err  error
}

func (b *built) get(prefix string, build func(dir string) (string, error)) (string, error) {
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", prefix)
		if err != nil {
			b.err = err
			return
		}
		b.lib, b.err = build(dir)
	})
	return b.lib, b.err
}

var emulator, fakeDNN built

// Emulator is package cuda's CPU emulator of the GPU kernels, closed when
// the test ends (skips only where there is no C++ compiler to build it).
func Emulator(t testing.TB) *cuda.Device {
	t.Helper()
	lib, err := emulator.get("graphpipe-emu-", cuda.BuildEmulator)
	if errors.Is(err, cuda.ErrNoCompiler) {
		t.Skipf("the CUDA kernels' CPU emulator needs a C++ compiler: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	d, err := cuda.OpenEmulator(lib)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// GPU is GPU 0, closed when the test ends, or a skip naming what is
// missing.
func GPU(t testing.TB) *cuda.Device {
	t.Helper()
	d, err := cuda.Open(0)
	if err != nil {
		t.Skipf("no GPU to test on: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// FakeDNN is the kernels' emulator with package cuda's fake cuDNN
// (cuda.BuildFakeDNN): conv2d's cuDNN path, its descriptors, algorithm
// choice, workspace and accumulation, run on the CPU. It skips only where
// there is no C++ compiler.
func FakeDNN(t testing.TB) *cuda.Device {
	t.Helper()
	d := Emulator(t)
	lib, err := fakeDNN.get("graphpipe-fakednn-", cuda.BuildFakeDNN)
	if errors.Is(err, cuda.ErrNoCompiler) {
		t.Skipf("the fake cuDNN needs a C++ compiler: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := d.UseDNN(lib); err != nil {
		t.Fatal(err)
	}
	return d
}

// DNN is GPU 0 with its cuDNN, or a skip saying which is missing.
func DNN(t testing.TB) *cuda.Device {
	t.Helper()
	d := GPU(t)
	d.ConvPath() // makes the cuDNN handle, or says why not
	if err := d.ConvPathReason(); err != nil {
		t.Skipf("no cuDNN on this GPU machine (conv2d runs as im2col + GEMM): %v", err)
	}
	return d
}
