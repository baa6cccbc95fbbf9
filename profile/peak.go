package profile

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// PeakDirEnv names a directory where every graphpipe process (a command and
// the workers it starts) writes its peak resident set at exit, in
// peak-PID.txt (VmHWM of /proc/self/status, in KiB). The benchmarks read
// it (MaxPeak): a child's rusage counts its parent's resident set at the
// fork, so a process started by a large one (the bench report) cannot be
// measured by its rusage.
const PeakDirEnv = "GRAPHPIPE_PEAK_DIR"

// WritePeak records this process's peak resident set when PeakDirEnv asks;
// it says nothing when it cannot (no /proc).
func WritePeak() {
	dir := os.Getenv(PeakDirEnv)
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

// MaxPeak is the largest peak resident set, in bytes, that the processes
// run with PeakDirEnv=dir wrote there; 0 when none did.
func MaxPeak(dir string) int64 {
	files, _ := filepath.Glob(filepath.Join(dir, "peak-*.txt"))
	var peak int64
	for _, f := range files {
		b, _ := os.ReadFile(f)
		var kb int64
		fmt.Sscan(string(b), &kb)
		peak = max(peak, kb*1024)
	}
	return peak
}
