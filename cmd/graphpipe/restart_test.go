package main

import (
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/runtime"
)

// TestKilledWorkersRestart kills workers five times in one run, at the named
// points (after a send, between the last gradient and the optimizer step,
// while handing over a checkpoint), with --restarts 5: the run ends with the
// parameters of an uninterrupted run of the same plan, bit for bit.
func TestKilledWorkersRestart(t *testing.T) {
	model := smallModel(t, "mmt")
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "3", "--device", "cpu", "--micro-batch", "4", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	base := []string{"run", plan, "--model", model, "--steps", "6", "--optimizer", "adam"}
	if code, _, errs := gp(t, "", append(base, "--dump", filepath.Join(dir, "straight"))...); code != 0 {
		t.Fatal(errs)
	}
	want := readParams(t, filepath.Join(dir, "straight", "final.safetensors"))
	kills := []string{"1:1:1:after-send", "2:0:2:before-step", "3:2:3:during-checkpoint", "4:1:3:after-send", "5:2:4:before-step"}
	os.Setenv(runtime.KillEnv, strings.Join(kills, ","))
	defer os.Unsetenv(runtime.KillEnv)
	code, _, errs := gp(t, "", append(base, "--restarts", "5", "--checkpoint", filepath.Join(dir, "ck"), "--checkpoint-every", "1",
		"--dump", filepath.Join(dir, "killed"))...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if got := strings.Count(errs, "restarting the workers"); got != len(kills) {
		t.Fatalf("%d restarts, want %d:\n%s", got, len(kills), errs)
	}
	sameParams(t, readParams(t, filepath.Join(dir, "killed", "final.safetensors")), want, 0)
	t.Logf("%d kill trials, final parameters bit-identical to the uninterrupted run", len(kills))
}

// TestKilledWorkerWithoutRestarts: restarts off, a killed worker ends the run
// with exit 1, and the last checkpoint still loads.
func TestKilledWorkerWithoutRestarts(t *testing.T) {
	model := smallModel(t, "mlp")
	dir := t.TempDir()
	os.Setenv(runtime.KillEnv, "1:0:2:before-step") // a point every plan has (a data-parallel plan sends nothing)
	defer os.Unsetenv(runtime.KillEnv)
	code, _, errs := gp(t, "", "run", model, "--devices", "2", "--device", "cpu", "--steps", "5",
		"--checkpoint", filepath.Join(dir, "ck"), "--checkpoint-every", "1")
	if code != 1 || !strings.Contains(errs, "worker process") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	c, err := runtime.LoadCheckpoint(filepath.Join(dir, "ck"), nil)
	if err != nil || c.Manifest.Step != 2 {
		t.Fatalf("last checkpoint: %v (%+v)", err, c)
	}
}

// startRun runs graphpipe run as a separate process (this test binary).
func startRun(t *testing.T, args ...string) *exec.Cmd {
	self, _ := os.Executable()
	c := exec.Command(self, append([]string{"run"}, args...)...)
	c.Env = append(os.Environ(), "GRAPHPIPE_TEST_MAIN=1")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitCheckpoint waits for a whole checkpoint in dir and returns its step.
func waitCheckpoint(t testing.TB, dir string) int {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := runtime.LoadCheckpoint(dir, nil); err == nil {
			return c.Manifest.Step
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no checkpoint appeared")
	return 0
}

// workerPIDs lists the worker processes of a run, from /proc (no procps needed).
func workerPIDs(run string) []int {
	return pidsWhere(func(args []string) bool {
		isWorker, ours := false, false
		for i, a := range args {
			isWorker = isWorker || a == "worker"
			ours = ours || a == "--run" && i+1 < len(args) && args[i+1] == run
		}
		return isWorker && ours
	})
}

// pidsWhere lists the live processes (not zombies: theirs is empty) whose
// command line match accepts, from /proc.
func pidsWhere(match func(args []string) bool) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		if match(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// workersOf counts the worker processes of a run.
func workersOf(run string) int { return len(workerPIDs(run)) }

func waitNoWorkers(t *testing.T, run string, within time.Duration) {
	deadline := time.Now().Add(within)
	for workersOf(run) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d workers of %s outlived their coordinator by %v", workersOf(run), run, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestKilledCoordinatorThenResume: the coordinator is SIGKILLed mid-run; its
// workers leave within the heartbeat timeout; --resume from its last
// checkpoint ends with the parameters of an uninterrupted run.
func TestKilledCoordinatorThenResume(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a coordinator killed and its run resumed; make check runs it")
	}
	model := smallModel(t, "mlp")
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	c := startRun(t, model, "--devices", "2", "--device", "cpu", "--micro-batch", "8", "--steps", "100000",
		"--checkpoint", ck, "--checkpoint-every", "1", "--run", "killc")
	waitCheckpoint(t, ck)
	c.Process.Kill()
	c.Wait()
	waitNoWorkers(t, "killc", 8*time.Second)
	at := waitCheckpoint(t, ck)
	total := fmt.Sprint(at + 3)
	if code, _, errs := gp(t, "", "run", model, "--devices", "2", "--device", "cpu", "--micro-batch", "8", "--steps", total,
		"--resume", ck, "--dump", filepath.Join(dir, "resumed")); code != 0 {
		t.Fatal(errs)
	}
	if code, _, errs := gp(t, "", "train", model, "--micro-batch", "8", "--steps", total, "--dump", filepath.Join(dir, "straight")); code != 0 {
		t.Fatal(errs)
	}
	sameParams(t, readParams(t, filepath.Join(dir, "resumed", "final.safetensors")), readParams(t, filepath.Join(dir, "straight", "final.safetensors")), 1e-5)
}

// TestInterrupt: Ctrl-C (SIGINT) during a run: it exits within 5 s, no worker
// outlives it, and its last checkpoint loads.
func TestInterrupt(t *testing.T) {
	model := smallModel(t, "mlp")
	ck := filepath.Join(t.TempDir(), "ck")
	c := startRun(t, model, "--devices", "2", "--device", "cpu", "--steps", "100000", "--checkpoint", ck, "--checkpoint-every", "1", "--run", "intr")
	waitCheckpoint(t, ck)
	sent := time.Now()
	c.Process.Signal(os.Interrupt)
	c.Wait()
	if d := time.Since(sent); d > 5*time.Second {
		t.Fatalf("exited %v after SIGINT", d)
	}
	waitNoWorkers(t, "intr", time.Second)
	if _, err := runtime.LoadCheckpoint(ck, nil); err != nil {
		t.Fatal(err)
	}
}

// TestRandomKills: SIGKILL a random worker process at random moments of a
// run with restarts on; it ends bit-identical to an uninterrupted run.
func TestRandomKills(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: workers killed at random; make check runs it")
	}
	model := smallModel(t, "case-study")
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "3", "--device", "cpu", "--micro-batch", "4", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	const steps = "400"
	if code, _, errs := gp(t, "", "run", plan, "--model", model, "--steps", steps, "--dump", filepath.Join(dir, "straight")); code != 0 {
		t.Fatal(errs)
	}
	c := startRun(t, plan, "--model", model, "--steps", steps, "--restarts", "3", "--checkpoint", filepath.Join(dir, "ck"),
		"--checkpoint-every", "10", "--dump", filepath.Join(dir, "killed"), "--run", "rand1")
	seed := time.Now().UnixNano()
	t.Logf("kill times and victims from seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	killed := 0
	var err error
kills:
	for {
		select {
		case err = <-done:
			break kills
		case <-time.After(time.Duration(200+rng.Intn(600)) * time.Millisecond):
			if killed == 3 {
				continue
			}
			if pids := workerPIDs("rand1"); len(pids) > 0 {
				syscall.Kill(pids[rng.Intn(len(pids))], syscall.SIGKILL)
				killed++
			}
		}
	}
	if err != nil {
		t.Fatalf("the run did not survive %d random kills: %v", killed, err)
	}
	if killed == 0 {
		t.Fatal("the run ended before any kill: the test exercised nothing")
	}
	sameParams(t, readParams(t, filepath.Join(dir, "killed", "final.safetensors")), readParams(t, filepath.Join(dir, "straight", "final.safetensors")), 0)
	t.Logf("%d random kills, final parameters bit-identical", killed)
}
