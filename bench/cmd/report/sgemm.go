package main

import (
	"fmt"
	"math/rand"
	"time"

	"github.com/graphpipe/graphpipe/bench"
	"github.com/graphpipe/graphpipe/tensor"
)

// rate is the best GFLOP/s of one second's calls of an n³ product, after a
// pause that lets another library's threads go idle.
func rate(n int, gemm func(a, b, c []float32)) float64 {
	r := rand.New(rand.NewSource(1))
	a, b, c := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
	for i := range a {
		a[i], b[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
	}
	time.Sleep(300 * time.Millisecond)
	gemm(a, b, c)
	start, reps := time.Now(), 0
	for time.Since(start) < time.Second || reps < 3 {
		gemm(a, b, c)
		reps++
	}
	return 2 * float64(n) * float64(n) * float64(n) * float64(reps) / time.Since(start).Seconds() / 1e9
}

func ours(n int) func(a, b, c []float32) {
	return func(a, b, c []float32) { tensor.Sgemm(false, false, n, n, n, 1, a, n, b, n, 0, c, n) }
}

// sgemmRows measures our sgemm, against OpenBLAS when built with it.
func sgemmRows(c bench.Config) ([][]string, error) {
	var rows [][]string
	for _, n := range []int{256, 512, 1024} {
		c.Log("sgemm %d", n)
		var best, blas float64
		for round := 0; round < 3; round++ { // alternate, keep each side's best
			best = max(best, rate(n, ours(n)))
			if lib := tensor.LibrarySgemm(); lib != nil {
				blas = max(blas, rate(n, func(a, b, c []float32) { lib(false, false, n, n, n, 1, a, n, b, n, 0, c, n) }))
			}
		}
		row := []string{fmt.Sprintf("sgemm %d³, GFLOP/s, ours vs OpenBLAS", n), fmt.Sprintf("%.1f", best), "not installed", "-"}
		if blas > 0 {
			row[2], row[3] = fmt.Sprintf("%.1f (%s)", blas, tensor.BLAS().Version), fmt.Sprintf("%.3f", best/blas)
		}
		rows = append(rows, row)
	}
	return rows, nil
}
