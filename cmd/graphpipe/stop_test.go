package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/runtime"
)

// runProc is graphpipe run in a process of its own, its stderr kept.
type runProc struct {
	*exec.Cmd
	stderr logBuffer
}

func (p *runProc) errs() string { return p.stderr.String() }

// logBuffer is a process's output as it comes, read while it runs.
type logBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (l *logBuffer) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(b)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startRunLogged(t *testing.T, args ...string) *runProc {
	t.Helper()
	self, _ := os.Executable()
	p := &runProc{Cmd: exec.Command(self, append([]string{"run"}, args...)...)}
	p.Env = append(os.Environ(), "GRAPHPIPE_TEST_MAIN=1")
	p.Stderr = &p.stderr
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Process.Kill(); p.Wait() })
	return p
}

// waitFor waits until the run's stderr says what.
func (p *runProc) waitFor(t *testing.T, what string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if strings.Contains(p.errs(), what) {
			return
		}
	}
	t.Fatalf("the run never said %q:\n%s", what, p.errs())
}

// exitCode waits for the process and returns its exit status.
func (p *runProc) exitCode(t *testing.T, within time.Duration) int {
	t.Helper()
	done := make(chan struct{})
	go func() { p.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(within):
		t.Fatalf("still running %v later:\n%s", within, p.errs())
	}
	return p.ProcessState.ExitCode()
}

// TestSigtermCheckpointsAndResumes: SIGTERM mid-run finishes the step in
// flight, writes a checkpoint at the step reached (none was due), says so
// once and exits 143 (128 + 15) with no worker left; resuming 30 steps
// further ends with the parameters of an uninterrupted run, bit for bit.
func TestSigtermCheckpointsAndResumes(t *testing.T) {
	model := smallModel(t, "mmt")
	dir := t.TempDir()
	plan, ck := filepath.Join(dir, "plan.json"), filepath.Join(dir, "ck")
	if code, _, errs := gp(t, "", "search", model, "--devices", "3", "--device", "cpu", "--micro-batch", "4", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	p := startRunLogged(t, plan, "--model", model, "--steps", "100000", "--optimizer", "adam", "--checkpoint", ck,
		"--checkpoint-every", "50000", "--run", "sigterm", "--log-every", "1")
	p.waitFor(t, "step 5/100000")
	p.Process.Signal(syscall.SIGTERM)
	if code := p.exitCode(t, 10*time.Second); code != 128+15 {
		t.Fatalf("exit %d, want 143:\n%s", code, p.errs())
	}
	waitNoWorkers(t, "sigterm", time.Second)
	c, err := runtime.LoadCheckpoint(ck, nil)
	if err != nil {
		t.Fatal(err)
	}
	at := c.Manifest.Step
	errs := p.errs()
	said := fmt.Sprintf("graphpipe: stopped at step %d; checkpoint step-%08d in %s; continue with --resume %s\n", at, at, ck, ck)
	if at < 5 || !strings.Contains(errs, said) || strings.Count(errs, "SIGTERM") != 1 || strings.Contains(errs, "signal received") ||
		!strings.Contains(errs, fmt.Sprintf("step %d/100000", at)) || strings.Contains(errs, fmt.Sprintf("step %d/100000", at+1)) {
		t.Fatalf("checkpoint at step %d; stderr:\n%s", at, errs)
	}
	total := fmt.Sprint(at + 30)
	if code, _, errs := gp(t, "", "run", plan, "--model", model, "--steps", total, "--optimizer", "adam", "--resume", ck, "--dump", filepath.Join(dir, "resumed")); code != 0 {
		t.Fatal(errs)
	}
	if code, _, errs := gp(t, "", "run", plan, "--model", model, "--steps", total, "--optimizer", "adam", "--dump", filepath.Join(dir, "straight")); code != 0 {
		t.Fatal(errs)
	}
	sameParams(t, readParams(t, filepath.Join(dir, "resumed", "final.safetensors")), readParams(t, filepath.Join(dir, "straight", "final.safetensors")), 0)
	t.Logf("stopped at step %d, resumed to %s: bit-identical", at, total)
}

// TestCheckpointDirOwned: a second run on a --checkpoint directory in use
// exits 2 within seconds, naming the directory and the holder (its run, host
// and pid), and the first run goes on checkpointing unharmed; a run killed
// outright leaves no stale lock.
func TestCheckpointDirOwned(t *testing.T) {
	model := smallModel(t, "mlp")
	ck := filepath.Join(t.TempDir(), "ck")
	args := []string{model, "--devices", "2", "--device", "cpu", "--steps", "100000", "--checkpoint", ck, "--checkpoint-every", "5"}
	first := startRunLogged(t, append(args, "--run", "owner")...)
	before := waitCheckpoint(t, ck)
	start := time.Now()
	host, _ := os.Hostname()
	code, _, errs := gp(t, "", "run", model, "--devices", "2", "--device", "cpu", "--steps", "10", "--checkpoint", ck, "--run", "intruder")
	want := fmt.Sprintf("--checkpoint %s: in use by run owner on host %s, pid %d", ck, host, first.Process.Pid)
	if code != 2 || !strings.HasPrefix(errs, want) || strings.Count(errs, "\n") != 1 {
		t.Fatalf("second run: exit %d, %q; want 2 and %q", code, errs, want)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the second run took %v to give up", d)
	}
	if n := workersOf("intruder"); n != 0 {
		t.Fatalf("the second run started %d workers", n)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := runtime.LoadCheckpoint(ck, nil); err == nil && c.Manifest.Step > before {
			if c.Manifest.Run != "owner" {
				t.Fatalf("the newest checkpoint is run %q's", c.Manifest.Run)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first run wrote no checkpoint after step %d:\n%s", before, first.errs())
		}
	}
	first.Process.Signal(os.Interrupt)
	if code := first.exitCode(t, 10*time.Second); code != 128+2 {
		t.Fatalf("the first run: exit %d, want 130:\n%s", code, first.errs())
	}
	// SIGKILL leaves the lock file but not the lock
	killed := startRunLogged(t, append(args, "--run", "killed")...)
	waitCheckpoint(t, ck)
	killed.Process.Kill()
	killed.exitCode(t, 5*time.Second)
	if code, _, errs := gp(t, "", "run", model, "--devices", "2", "--device", "cpu", "--steps", "3", "--checkpoint", ck, "--run", "after"); code != 0 {
		t.Fatalf("a run after one killed: exit %d: %s", code, errs)
	}
	waitNoWorkers(t, "killed", 8*time.Second)
}

// TestSecondSignalStopsAtOnce: a second SIGTERM, while the first one's
// step and checkpoint are under way, ends the run within a second, exit
// 143, with no worker left.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	model := smallModel(t, "mlp")
	ck := filepath.Join(t.TempDir(), "ck")
	p := startRunLogged(t, model, "--devices", "2", "--device", "cpu", "--steps", "100000", "--checkpoint", ck,
		"--checkpoint-every", "1", "--run", "twice", "--log-every", "1")
	p.waitFor(t, "step 3/100000")
	p.Process.Signal(syscall.SIGTERM)
	p.waitFor(t, "send it again to stop at once")
	p.Process.Signal(syscall.SIGTERM)
	sent := time.Now()
	code := p.exitCode(t, 10*time.Second)
	if d := time.Since(sent); code != 128+15 || d > time.Second {
		t.Fatalf("exit %d after %v, want 143 within a second:\n%s", code, d, p.errs())
	}
	waitNoWorkers(t, "twice", 5*time.Second)
}
