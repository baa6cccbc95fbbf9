package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// TestKernelsCompileAsCUDA compiles kernels.cu for sm_90 with clang's CUDA
// front end (no CUDA toolkit needed: testdata/clang-cuda-prelude.h stands in
// for what NVRTC has built in) and checks that every kernel became a PTX
// entry. It checks the CUDA-only code (inline PTX, intrinsics, atomics) the
// CPU emulator does not compile; NVRTC itself is checked on a GPU machine.
// It skips where no clang is found ($CLANG, clang-19, clang).
func TestKernelsCompileAsCUDA(t *testing.T) {
	var clang string
	for _, c := range []string{os.Getenv("CLANG"), "clang-19", "clang"} {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			clang = p
			break
		}
	}
	if clang == "" {
		t.Skip("no clang to compile kernels.cu as CUDA (apt-get install clang-19)")
	}
	prelude, _ := filepath.Abs("testdata/clang-cuda-prelude.h")
	ptx := filepath.Join(t.TempDir(), "kernels.ptx")
	out, err := exec.Command(clang, "-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=sm_90", "-nocudainc", "-nocudalib",
		"-std=c++17", "-Wall", "-Werror", "-include", prelude, "-S", "-o", ptx, "kernels.cu").CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", clang, err, out)
	}
	data, err := os.ReadFile(ptx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range kernelSig.FindAllStringSubmatch(kernelSource, -1) {
		if !regexp.MustCompile(`\.entry ` + m[1] + `\(`).Match(data) {
			t.Errorf("kernel %s is not a PTX entry", m[1])
		}
	}
}
