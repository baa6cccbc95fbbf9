//go:build !amd64 || purego

package tensor

func kernel(k int, a, b, c []float32, ldc int, set bool) { kernelTiles(1, k, a, b, c, ldc, set) }

// kernelTiles runs kernelGo on tiles tiles down C: tile t is C[6t:6t+6, :nr]
// from A's sliver a[6kt:] and b.
func kernelTiles(tiles, k int, a, b, c []float32, ldc int, set bool) {
	for t := 0; t < tiles; t++ {
		kernelGo(k, a[t*mr*k:], b, c[t*mr*ldc:], ldc, set)
	}
}

func copyRows(k int, src []float32, lds int, dst []float32) { copyRowsGo(k, src, lds, dst) }

type kernelChoice struct {
	name string
	nr   int
}

var kernels = []kernelChoice{{"go", 16}}

func use(k kernelChoice) { nr = k.nr }

// coreType leaves OpenBLAS its own choice of kernels.
func coreType() string { return "" }
