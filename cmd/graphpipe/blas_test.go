package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// graphpipeWith runs this test binary as graphpipe (TestMain) in a process
// of its own, with extra environment: the BLAS library loads once per
// process.
func graphpipeWith(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, self, args...)
	c.Env = append(os.Environ(), env...)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a run's workers are killed with it
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	c.WaitDelay = 5 * time.Second
	out, _ := c.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%v hangs:\n%s", args, out)
	}
	return c.ProcessState.ExitCode(), string(out)
}

// TestBLASChoiceStopsComputing: a GRAPHPIPE_BLAS that does not load (a
// missing file, a FIFO, a library whose cblas_sgemm does nothing) stops
// every command that computes with exit 2 naming the variable, before it
// starts; the --batch 0 check beside it still runs. The --batch check had
// replaced the root's BLAS check, and such runs trained silently on the Go
// kernels (or wrong, on the do-nothing library).
func TestBLASChoiceStopsComputing(t *testing.T) {
	model := smallModel(t, "mlp")
	dir := t.TempDir()
	fifo := filepath.Join(dir, "libfifo.so")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, lib, want string
	}{
		{"missing", filepath.Join(dir, "libnone.so"), "no such file"},
		{"fifo", fifo, "is not a regular file but a named pipe"},
	}
	if cc, err := exec.LookPath("cc"); err == nil {
		src, lib := filepath.Join(dir, "nop.c"), filepath.Join(dir, "libnop.so")
		os.WriteFile(src, []byte("void cblas_sgemm(void) {}\n"), 0o644)
		if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
			t.Fatalf("cc: %v\n%s", err, out)
		}
		cases = append(cases, struct{ name, lib, want string }{"does nothing", lib, "computes a wrong product"})
	}
	for _, tc := range cases {
		for _, args := range [][]string{{"train", model, "--steps", "1"}, {"run", model, "--devices", "1", "--device", "cpu", "--steps", "1"}} {
			t.Run(tc.name+"/"+args[0], func(t *testing.T) {
				code, out := graphpipeWith(t, []string{"GRAPHPIPE_BLAS=" + tc.lib}, args...)
				if code != 2 || !strings.Contains(out, "GRAPHPIPE_BLAS="+tc.lib+": ") || !strings.Contains(out, tc.want) || strings.Contains(out, "step 1") {
					t.Fatalf("exit %d:\n%s\nwant exit 2 before any step, naming GRAPHPIPE_BLAS=%s and saying %q", code, out, tc.lib, tc.want)
				}
			})
		}
	}
	code, out := graphpipeWith(t, []string{"GRAPHPIPE_BLAS=go"}, "train", model, "--batch", "0")
	if code != 2 || !strings.Contains(out, "--batch: must be positive, got 0") {
		t.Fatalf("--batch 0: exit %d:\n%s", code, out)
	}
}
