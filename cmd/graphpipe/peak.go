package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// peakDirEnv names a directory where every graphpipe process (a command and
// the workers it starts) writes its peak resident set at exit, in
// peak-PID.txt (VmHWM of /proc/self/status, in KiB). The benchmarks read
// it: a child's rusage counts its parent's resident set at the fork, so a
// process started by a large one (the bench report) cannot be measured by
// its rusage.
const peakDirEnv = "GRAPHPIPE_PEAK_DIR"

// writePeak records this process's peak resident set when peakDirEnv asks.
func writePeak() {
	dir := os.Getenv(peakDirEnv)
	if dir == "" {
		return
	}
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "VmHWM:") {
			kb := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(l, "VmHWM:"), "kB"))
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("peak-%d.txt", os.Getpid())), []byte(kb+"\n"), 0o644)
			return
		}
	}
}
