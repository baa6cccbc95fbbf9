package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCPUProfileEnv: with GRAPHPIPE_CPUPROFILE_DIR set, a command writes a
// CPU profile named after its process; a directory that cannot take it
// gives a warning and the command still succeeds.
func TestCPUProfileEnv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(cpuProfileEnv, dir)
	if c, _, e := gp(t, "", "models", "list"); c != 0 {
		t.Fatal(e)
	}
	st, err := os.Stat(filepath.Join(dir, fmt.Sprintf("cpu-%d.pprof", os.Getpid())))
	if err != nil || st.Size() == 0 {
		t.Fatalf("no profile written: %v", err)
	}
	t.Setenv(cpuProfileEnv, filepath.Join(dir, "missing", "deeper"))
	c, _, e := gp(t, "", "models", "list")
	if c != 0 || !strings.Contains(e, cpuProfileEnv) {
		t.Fatalf("exit %d, stderr %q: want success and a warning naming %s", c, e, cpuProfileEnv)
	}
}
