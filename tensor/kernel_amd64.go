//go:build amd64 && !purego

package tensor

import "golang.org/x/sys/cpu"

// asm is the assembly micro-kernel in use, nil for the Go one; asmRows is
// its packB row copy.
var (
	asm     func(tiles, k int, a, b, c *float32, ldc int, set bool)
	asmRows func(k int, src *float32, lds int, dst *float32)
)

// kernels lists the micro-kernels this CPU runs, fastest first; the Go one
// (nil) is always last.
var kernels = []kernelChoice{{"go", nil, nil, 16}}

type kernelChoice struct {
	name string
	fn   func(tiles, k int, a, b, c *float32, ldc int, set bool)
	rows func(k int, src *float32, lds int, dst *float32)
	nr   int
}

func init() {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		kernels = append([]kernelChoice{{"avx2", kernel6x16, copyRows16, 16}}, kernels...)
	}
	if cpu.X86.HasAVX512F {
		kernels = append([]kernelChoice{{"avx512", kernel6x32, copyRows32, 32}}, kernels...)
	}
	use(kernels[0])
}

// use makes a kernel the active one (tests switch between them).
func use(k kernelChoice) { asm, asmRows, nr = k.fn, k.rows, k.nr }

// kernel6x16 is kernelTiles with nr = 16 in AVX2/FMA assembly; tiles ≥ 1, k ≥ 0.
//
//go:noescape
func kernel6x16(tiles, k int, a, b, c *float32, ldc int, set bool)

// kernel6x32 is kernelTiles with nr = 32 in AVX-512 assembly; tiles ≥ 1, k ≥ 0.
//
//go:noescape
func kernel6x32(tiles, k int, a, b, c *float32, ldc int, set bool)

// copyRows16 and copyRows32 are copyRowsGo for nr = 16 (AVX) and nr = 32
// (AVX-512); k ≥ 1.
//
//go:noescape
func copyRows16(k int, src *float32, lds int, dst *float32)

//go:noescape
func copyRows32(k int, src *float32, lds int, dst *float32)

func kernel(k int, a, b, c []float32, ldc int, set bool) { kernelTiles(1, k, a, b, c, ldc, set) }

// kernelTiles runs the micro-kernel on tiles tiles down C: tile t is
// C[6t:6t+6, :nr] from A's sliver a[6kt:] and b.
func kernelTiles(tiles, k int, a, b, c []float32, ldc int, set bool) {
	if asm == nil || k == 0 {
		for t := 0; t < tiles; t++ {
			kernelGo(k, a[t*mr*k:], b, c[t*mr*ldc:], ldc, set)
		}
		return
	}
	_ = a[tiles*k*mr-1]
	_ = b[k*nr-1]
	_ = c[(tiles*mr-1)*ldc+nr-1]
	asm(tiles, k, &a[0], &b[0], &c[0], ldc, set)
}

// copyRows is copyRowsGo on the active kernel's assembly where it has one.
func copyRows(k int, src []float32, lds int, dst []float32) {
	if asmRows == nil || k == 0 {
		copyRowsGo(k, src, lds, dst)
		return
	}
	_ = src[(k-1)*lds+nr-1]
	_ = dst[k*nr-1]
	asmRows(k, &src[0], lds, &dst[0])
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
