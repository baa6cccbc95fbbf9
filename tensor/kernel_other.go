//go:build !amd64 || purego

package tensor

func kernel(k int, a, b, c []float32, ldc int, set bool) { kernelGo(k, a, b, c, ldc, set) }

func copyRows(k int, src []float32, lds int, dst []float32) { copyRowsGo(k, src, lds, dst) }

type kernelChoice struct {
	name string
	nr   int
}

var kernels = []kernelChoice{{"go", 16}}

func use(k kernelChoice) { nr = k.nr }

// coreType leaves OpenBLAS its own choice of kernels.
func coreType() string { return "" }
