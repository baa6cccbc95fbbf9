//go:build !linux

package bench

// threadCPU is not read here: the sgemm section times by the wall clock.
func threadCPU() (float64, bool) { return 0, false }
