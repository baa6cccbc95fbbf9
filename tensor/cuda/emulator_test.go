package cuda

import (
	"errors"
	"sync"
	"testing"
)

var (
	emuOnce sync.Once
	emuLib  string
	emuErr  error
)

// emulator opens a Device on the CPU emulator, building it once per test
// binary; it skips, naming the compiler, where there is none.
func emulator(t testing.TB) *Device {
	t.Helper()
	emuOnce.Do(func() {
		dir, err := osMkdirTemp()
		if err != nil {
			emuErr = err
			return
		}
		emuLib, emuErr = BuildEmulator(dir)
	})
	if errors.Is(emuErr, ErrNoCompiler) {
		t.Skipf("the CUDA kernels' CPU emulator needs a C++ compiler: %v", emuErr)
	}
	if emuErr != nil {
		t.Fatal(emuErr)
	}
	d, err := OpenEmulator(emuLib)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}
