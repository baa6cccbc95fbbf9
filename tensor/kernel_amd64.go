//go:build amd64 && !purego

package tensor

import "golang.org/x/sys/cpu"

// asm is the assembly micro-kernel in use, nil for the Go one.
var asm func(k int, a, b, c *float32, ldc int)

// kernels lists the micro-kernels this CPU runs, fastest first; the Go one
// (nil) is always last.
var kernels = []kernelChoice{{"go", nil, 16}}

type kernelChoice struct {
	name string
	fn   func(k int, a, b, c *float32, ldc int)
	nr   int
}

func init() {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		kernels = append([]kernelChoice{{"avx2", kernel6x16, 16}}, kernels...)
	}
	if cpu.X86.HasAVX512F {
		kernels = append([]kernelChoice{{"avx512", kernel6x32, 32}}, kernels...)
	}
	use(kernels[0])
}

// use makes a kernel the active one (tests switch between them).
func use(k kernelChoice) { asm, nr = k.fn, k.nr }

// kernel6x16 is kernelGo with nr = 16 in AVX2/FMA assembly; k ≥ 0.
//
//go:noescape
func kernel6x16(k int, a, b, c *float32, ldc int)

// kernel6x32 is kernelGo with nr = 32 in AVX-512 assembly; k ≥ 0.
//
//go:noescape
func kernel6x32(k int, a, b, c *float32, ldc int)

func kernel(k int, a, b, c []float32, ldc int) {
	if asm == nil || k == 0 {
		kernelGo(k, a, b, c, ldc)
		return
	}
	_ = a[k*mr-1]
	_ = b[k*nr-1]
	_ = c[(mr-1)*ldc+nr-1]
	asm(k, &a[0], &b[0], &c[0], ldc)
}

// coreType is the OpenBLAS kernels for this CPU's vector units: SkylakeX
// with AVX-512, Haswell with AVX2 and FMA, "" (OpenBLAS's own choice)
// otherwise.
func coreType() string {
	switch {
	case cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL:
		return "SkylakeX"
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		return "Haswell"
	}
	return ""
}
