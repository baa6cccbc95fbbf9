//go:build openblas && cgo

package main

import (
	"os"

	"github.com/graphpipe/graphpipe/internal/openblas"
)

func openblasRate(n int) (float64, bool) {
	return rate(n, func(a, b, c []float32) { openblas.Sgemm(false, false, n, n, n, 1, a, n, b, n, 0, c, n) }), true
}

func openblasCore() string {
	if c := os.Getenv("OPENBLAS_CORETYPE"); c != "" {
		return "pinned to " + c
	}
	return "its own choice of kernels"
}
