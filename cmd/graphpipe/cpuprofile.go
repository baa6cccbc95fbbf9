package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
)

// cpuProfileEnv names a directory: when set, every graphpipe process (the
// coordinator and each worker it starts) writes a Go CPU profile of itself
// there, as cpu-PID.pprof, for `go tool pprof`. A developer's tool for
// finding where a run's host time goes.
const cpuProfileEnv = "GRAPHPIPE_CPUPROFILE_DIR"

// startCPUProfile starts the profile cpuProfileEnv asks for and returns
// the function that ends it (a no-op where it is not set). A profile that
// cannot be started is reported on stderr and the command goes on.
func startCPUProfile(stderr io.Writer) func() {
	dir := os.Getenv(cpuProfileEnv)
	if dir == "" {
		return func() {}
	}
	path := filepath.Join(dir, fmt.Sprintf("cpu-%d.pprof", os.Getpid()))
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(stderr, "graphpipe: %s: no CPU profile: %v\n", cpuProfileEnv, err)
		if f != nil {
			f.Close()
		}
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
