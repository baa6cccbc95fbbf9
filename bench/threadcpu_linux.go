package bench

import "golang.org/x/sys/unix"

// threadCPU is the calling thread's CPU time in seconds (the goroutine
// locked to it), or ok false where the clock cannot be read.
func threadCPU() (s float64, ok bool) {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0, false
	}
	return float64(ts.Nano()) / 1e9, true
}
