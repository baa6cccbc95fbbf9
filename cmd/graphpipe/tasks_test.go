package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/runtime"
)

// twoTower imports the two-tower model of onnx/testdata into dir and plans
// it on 3 cpu devices: the model, its weights, the plan.
func twoTower(t *testing.T, dir string) (model, weights, plan string) {
	t.Helper()
	model, weights, plan = filepath.Join(dir, "m.json"), filepath.Join(dir, "w.safetensors"), filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "import", "../../onnx/testdata/models/two_tower.onnx", "-o", model, "--weights", weights,
		"--loss", "softmax_cross_entropy", "--batch", "12"); code != 0 {
		t.Fatal(errs)
	}
	if code, _, errs := gp(t, "", "search", model, "--devices", "3", "--device", "cpu", "--micro-batch", "4", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	return model, weights, plan
}

// task is graphpipe run as one task of an environment: this test binary,
// in dir, with env added to its own.
func task(t *testing.T, dir string, env []string, args ...string) *runProc {
	t.Helper()
	self, _ := os.Executable()
	p := &runProc{Cmd: exec.Command(self, append([]string{"run"}, args...)...)}
	p.Dir, p.Env, p.Stderr = dir, append(append(os.Environ(), "GRAPHPIPE_TEST_MAIN=1"), env...), &p.stderr
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Process.Kill(); p.Wait() })
	return p
}

// torchrun is torchrun's environment for rank of world on one host, rank 0
// at 127.0.0.1:port.
func torchrun(rank, world, port int) []string {
	return []string{fmt.Sprint("RANK=", rank), fmt.Sprint("WORLD_SIZE=", world), fmt.Sprint("LOCAL_RANK=", rank),
		"MASTER_ADDR=127.0.0.1", fmt.Sprint("MASTER_PORT=", port)}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestTorchrunByHand: 3 processes started by hand with torchrun's
// variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), each
// running the same command, train the two-tower model to the parameters
// of a local run of the same plan, bit for bit; rank 0 coordinated, the
// others joined as devices 1 and 2, and the rendezvous file is gone.
func TestTorchrunByHand(t *testing.T) {
	dir := t.TempDir()
	model, weights, plan := twoTower(t, dir)
	common := []string{plan, "--model", model, "--init", weights, "--steps", "6", "--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9"}
	port := freePort(t)
	var procs []*runProc
	for _, rank := range []int{2, 1, 0} { // rank 0 last: the others wait for it
		procs = append(procs, task(t, dir, torchrun(rank, 3, port), append(common, "--dump", filepath.Join(dir, fmt.Sprint("rank", rank)))...))
	}
	for i, p := range procs {
		if code := p.exitCode(t, 60*time.Second); code != 0 {
			t.Fatalf("rank %d exited %d:\n%s", 2-i, code, p.errs())
		}
	}
	if errs := procs[2].errs(); !strings.Contains(errs, "task 0 of 3 (RANK 0) coordinates run torchrun-127-0-0-1-") {
		t.Fatalf("rank 0 did not say it coordinates:\n%s", errs)
	}
	for i, d := range []int{2, 1} {
		if errs := procs[i].errs(); !strings.Contains(errs, fmt.Sprintf("joining generation 1 of run torchrun-127-0-0-1-%d-0 as device %d of the plan", port, d)) {
			t.Fatalf("rank %d did not join as device %d:\n%s", d, d, errs)
		}
	}
	if code, _, errs := gp(t, "", append([]string{"run", "--workers", "local", "--dump", filepath.Join(dir, "local")}, common...)...); code != 0 {
		t.Fatal(errs)
	}
	sameParams(t, readParams(t, filepath.Join(dir, "rank0", "final.safetensors")), readParams(t, filepath.Join(dir, "local", "final.safetensors")), 0)
	if rv, _ := filepath.Glob(filepath.Join(dir, ".graphpipe-*")); len(rv) != 0 {
		t.Fatalf("the rendezvous file is left: %v", rv)
	}
}

// TestTaskEnvRefused: a wrong or partial environment exits 2 in one line
// naming the variable at fault.
func TestTaskEnvRefused(t *testing.T) {
	dir := t.TempDir()
	model, _, plan := twoTower(t, dir)
	slurm := []string{"SLURM_JOB_ID=7", "SLURM_STEP_ID=0", "SLURM_NTASKS=3", "SLURM_NODEID=0", "SLURM_LOCALID=0", "SLURM_JOB_NODELIST=vm"}
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"SLURM_PROCID beyond SLURM_NTASKS", append(slurm, "SLURM_PROCID=3"), "SLURM_PROCID: 3 is beyond SLURM_NTASKS 3 (ranks 0 to 2)"},
		{"no MASTER_ADDR", []string{"RANK=1", "WORLD_SIZE=3", "MASTER_PORT=29500"}, "MASTER_ADDR: not set"},
		{"a task more than the plan's devices", torchrun(0, 4, freePort(t)), "WORLD_SIZE: 4 tasks, but the plan runs on 3 devices"},
		{"Slurm's and torchrun's variables, not torchrun's doing", append(slurm[:len(slurm):len(slurm)], append(torchrun(0, 3, freePort(t)), "SLURM_PROCID=0")...),
			"RANK: 0 is set, and so are Slurm's variables (SLURM_PROCID 0 of SLURM_NTASKS 3), but no TORCHELASTIC_RUN_ID says torchrun started this process"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := task(t, dir, tc.env, plan, "--model", model, "--steps", "2")
			code := p.exitCode(t, 30*time.Second)
			if errs := strings.TrimSuffix(p.errs(), "\n"); code != 2 || !strings.HasPrefix(errs, tc.want) || strings.Contains(errs, "\n") {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 2 and one line starting %q", code, errs, tc.want)
			}
		})
	}
	// given the model, task 0 plans for its tasks: what the environment
	// says of their number is named, not --devices, which was not given
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"more tasks than a plan has devices", torchrun(0, 5000, freePort(t)), nil, "WORLD_SIZE: 5000 tasks, but a run of tasks plans one device per task, and a plan has 1 to 4096 devices"},
		{"--devices against the tasks", torchrun(0, 2, freePort(t)), []string{"--devices", "3"}, "--devices 3: the run's tasks are 2 (WORLD_SIZE 2), one per device of the plan: leave --devices out"},
		{"a MASTER_ADDR not of this host", []string{"RANK=0", "WORLD_SIZE=3", "MASTER_ADDR=192.0.2.1", fmt.Sprint("MASTER_PORT=", freePort(t))}, nil,
			"MASTER_ADDR: 192.0.2.1 is not an address of this host ("},
		{"no port after MASTER_PORT", []string{"RANK=0", "WORLD_SIZE=3", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=65535", "TORCHELASTIC_USE_AGENT_STORE=True"}, nil,
			"MASTER_PORT: 65535: torchrun's agent holds it (TORCHELASTIC_USE_AGENT_STORE=True) and task 0's server takes the port after it, which would be 65536"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := task(t, dir, tc.env, append([]string{model, "--steps", "2"}, tc.args...)...)
			code := p.exitCode(t, 30*time.Second)
			if errs := strings.TrimSuffix(p.errs(), "\n"); code != 2 || !strings.HasPrefix(strings.TrimPrefix(errs, "graphpipe: "), tc.want) || strings.Count(errs, "\n") > 1 {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 2 and a line starting %q", code, errs, tc.want)
			}
		})
	}
	t.Run("two tasks claiming rank 0", func(t *testing.T) {
		port := freePort(t)
		// given the model, rank 0 plans for the 2 tasks
		first := task(t, dir, torchrun(0, 2, port), model, "--steps", "2")
		first.waitFor(t, "coordinates run")
		second := task(t, dir, torchrun(0, 2, port), model, "--steps", "2")
		code := second.exitCode(t, 30*time.Second)
		if errs := strings.TrimSuffix(second.errs(), "\n"); code != 2 || !strings.HasPrefix(errs, fmt.Sprintf("RANK: 0, but 127.0.0.1:%d is taken: another task claims rank 0", port)) ||
			!strings.HasSuffix(errs, "address already in use)") || strings.Contains(errs, "\n") {
			t.Fatalf("the second rank 0 exited %d:\n%s", code, errs)
		}
	})
	t.Run("two tasks claiming rank 1", func(t *testing.T) {
		port := freePort(t)
		args := []string{plan, "--model", model, "--steps", "100000"}
		zero := task(t, dir, torchrun(0, 3, port), args...)
		task(t, dir, torchrun(1, 3, port), args...)
		task(t, dir, torchrun(1, 3, port), args...)
		task(t, dir, torchrun(2, 3, port), args...)
		code := zero.exitCode(t, 60*time.Second)
		errs := zero.errs()
		last := errs[strings.LastIndex(strings.TrimSuffix(errs, "\n"), "\n")+1:]
		// the launcher hears both (two tasks claim rank 1), or the
		// coordinator refuses the second (two tasks stand for device 1)
		if code != 2 || !strings.HasPrefix(last, "RANK: two tasks claim rank 1: host ") && !strings.HasPrefix(last, "RANK: two tasks stand for device 1 of the plan: host ") {
			t.Fatalf("rank 0 exited %d:\n%s", code, errs)
		}
	})
}

// TestParsePreempt: --preempt-signal takes a signal's name, with or
// without SIG, in any case, or its number; anything else is refused.
func TestParsePreempt(t *testing.T) {
	for _, tc := range []struct {
		name string
		want string // signalName's, "" for refused
	}{
		{"USR1", "SIGUSR1"}, {"sigusr2", "SIGUSR2"}, {"SIGTERM", "SIGTERM"}, {"15", "SIGTERM"}, {"int", "SIGINT"}, {"HUP", "SIGHUP"},
		{"KILL", ""}, {"9", ""}, {"", ""}, {"USR3", ""},
	} {
		sig, err := parsePreempt(tc.name)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%q: took %v", tc.name, sig)
		case tc.want != "" && (err != nil || signalName(sig) != tc.want):
			t.Errorf("%q: %v, %v; want %s", tc.name, sig, err, tc.want)
		}
	}
}

// TestTasksOfAFailedRunFail: the other tasks of a run that failed (task
// 0's own worker killed mid-run, no restarts) exit non-zero, naming the
// run's failure, as task 0 does: an environment that reruns failed tasks
// (a Kubernetes Indexed Job) must not count them completed.
func TestTasksOfAFailedRunFail(t *testing.T) {
	dir := t.TempDir()
	model, _, plan := twoTower(t, dir)
	port := freePort(t)
	args := []string{plan, "--model", model, "--steps", "6"}
	others := []*runProc{task(t, dir, torchrun(1, 3, port), args...), task(t, dir, torchrun(2, 3, port), args...)}
	zero := task(t, dir, append(torchrun(0, 3, port), runtime.KillEnv+"=1:0:2:after-send"), args...)
	if code := zero.exitCode(t, 60*time.Second); code == 0 {
		t.Fatalf("task 0 exited 0:\n%s", zero.errs())
	}
	for i, p := range others {
		code := p.exitCode(t, 30*time.Second)
		if errs := p.errs(); code == 0 || !strings.Contains(errs, fmt.Sprintf("graphpipe: run torchrun-127-0-0-1-%d-0 failed: ", port)) {
			t.Fatalf("task %d of the failed run exited %d:\n%s", i+1, code, errs)
		}
	}
}

// TestTaskSignalsBeforeTheRun: task 0 waiting for its tasks stops at the
// first SIGTERM, SIGINT or preemption signal with 128 + it, removes its
// rendezvous file and says it saved nothing new (not "no --checkpoint",
// which it was given); so does a task waiting for task 0's orders.
func TestTaskSignalsBeforeTheRun(t *testing.T) {
	dir := t.TempDir()
	model, _, plan := twoTower(t, dir)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1} {
		t.Run(signalName(sig), func(t *testing.T) {
			port := freePort(t)
			args := []string{plan, "--model", model, "--steps", "4", "--checkpoint", filepath.Join(dir, "ck-"+signalName(sig))}
			zero := task(t, dir, torchrun(0, 3, port), args...)
			zero.waitFor(t, "coordinates run")
			one := task(t, dir, torchrun(1, 3, port), args...) // task 2 never comes
			one.waitFor(t, "waiting for task 0's orders")
			one.Process.Signal(sig)
			if code := one.exitCode(t, 10*time.Second); code != 128+int(sig) || !strings.Contains(one.errs(), "task 1 stopped before it joined the run") {
				t.Fatalf("task 1 exited %d, want %d:\n%s", code, 128+int(sig), one.errs())
			}
			zero.Process.Signal(sig)
			code := zero.exitCode(t, 10*time.Second)
			errs := zero.errs()
			if code != 128+int(sig) || !strings.Contains(errs, "graphpipe: stopped at step 0 while waiting for the workers; nothing new to save") || strings.Contains(errs, "no --checkpoint") {
				t.Fatalf("task 0 exited %d, want %d:\n%s", code, 128+int(sig), errs)
			}
			if rv, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf(".graphpipe-*-%d-*", port))); len(rv) != 0 {
				t.Fatalf("the rendezvous file is left: %v", rv)
			}
		})
	}
}

// TestTaskIntrudersRefused: a second launch started by mistake in the
// directory and on the port of a running one does not end it. Its task 0
// finds the port taken; its other tasks, which find the running job's
// rendezvous file and join its server, are refused with exit 2: those of
// the same command because their ranks are held by live tasks and they
// started after the run began, one given another plan, one counting
// another number of tasks. The running job trains on until stopped.
func TestTaskIntrudersRefused(t *testing.T) {
	dir := t.TempDir()
	model, _, plan := twoTower(t, dir)
	other := filepath.Join(dir, "plan-mb2.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "3", "--device", "cpu", "--micro-batch", "2", "-o", other); code != 0 {
		t.Fatal(errs)
	}
	port := freePort(t)
	args := []string{plan, "--model", model, "--steps", "100000", "--log-every", "1"}
	zero := task(t, dir, torchrun(0, 3, port), args...)
	task(t, dir, torchrun(1, 3, port), args...)
	task(t, dir, torchrun(2, 3, port), args...)
	zero.waitFor(t, "step 3/100000")
	second := task(t, dir, torchrun(0, 3, port), args...)
	if code := second.exitCode(t, 30*time.Second); code != 2 || !strings.Contains(second.errs(), "is taken: another task claims rank 0") {
		t.Fatalf("the second launch's task 0 exited %d:\n%s", code, second.errs())
	}
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{torchrun(1, 3, port), args, "RANK 1 is task 1's (host "},
		{torchrun(2, 3, port), args, "RANK 2 is task 2's (host "},
		{torchrun(1, 3, port), append([]string{other}, args[1:]...), "it was given another model or plan"},
		{torchrun(3, 4, port), args, "it is one of 4 tasks (WORLD_SIZE), and this run's are 3"},
	} {
		p := task(t, dir, tc.env, tc.args...)
		code := p.exitCode(t, 30*time.Second)
		errs := p.errs()
		if code != 2 || !strings.Contains(errs, "refused by task 0 of run torchrun-127-0-0-1-") || !strings.Contains(errs, tc.want) {
			t.Fatalf("an intruder (%v) exited %d, want 2 and %q:\n%s", tc.env, code, tc.want, errs)
		}
	}
	n := strings.Count(zero.errs(), "\nstep ")
	for deadline := time.Now().Add(30 * time.Second); strings.Count(zero.errs(), "\nstep ") < n+3; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the running job no longer trains:\n%s", zero.errs())
		}
	}
	if errs := zero.errs(); strings.Count(errs, "refused a task claiming") != 4 {
		t.Fatalf("task 0 does not say it refused 4 tasks:\n%s", errs)
	}
	zero.Process.Signal(syscall.SIGTERM)
	if code := zero.exitCode(t, 30*time.Second); code != 128+15 {
		t.Fatalf("the running job's task 0 exited %d:\n%s", code, zero.errs())
	}
}

// TestTorchrunInsideSlurm: 'srun torchrun ... graphpipe run' gives each
// process Slurm's variables (one srun task, which torchrun is) and
// torchrun's: the processes follow torchrun's, say so, and train as its 3
// tasks, instead of each running a whole local run.
func TestTorchrunInsideSlurm(t *testing.T) {
	dir := t.TempDir()
	model, _, plan := twoTower(t, dir)
	port := freePort(t)
	srun := []string{"SLURM_JOB_ID=7", "SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_NTASKS=1", "SLURM_NODEID=0", "SLURM_LOCALID=0", "SLURM_JOB_NODELIST=vm",
		"TORCHELASTIC_RUN_ID=7", "TORCHELASTIC_RESTART_COUNT=0"}
	var procs []*runProc
	for _, rank := range []int{2, 1, 0} {
		procs = append(procs, task(t, dir, append(append([]string{}, srun...), torchrun(rank, 3, port)...), plan, "--model", model, "--steps", "2"))
	}
	for i, p := range procs {
		if code := p.exitCode(t, 60*time.Second); code != 0 {
			t.Fatalf("rank %d exited %d:\n%s", 2-i, code, p.errs())
		}
	}
	errs := procs[2].errs()
	said := "graphpipe: torchrun's variables (RANK 0 of WORLD_SIZE 3) and Slurm's (SLURM_PROCID 0 of SLURM_NTASKS 1) are both set, as under 'srun torchrun': following torchrun's, the launcher that started this process"
	if !strings.Contains(errs, said) || !strings.Contains(errs, "task 0 of 3 (RANK 0) coordinates run torchrun-127-0-0-1-") {
		t.Fatalf("rank 0 did not say it follows torchrun and coordinates its 3 tasks:\n%s", errs)
	}
	if !strings.Contains(procs[0].errs(), "joining generation 1 of run torchrun-127-0-0-1-") {
		t.Fatalf("rank 2 did not join:\n%s", procs[0].errs())
	}
}

// TestTasksResumeAutoNothingLeft: a requeued job that had finished
// (--resume auto, its checkpoint at --steps) exits 0 saying there is
// nothing left to do, task 0 and the other tasks alike, which task 0 tells
// through the rendezvous file; an explicit --resume at --steps names
// --steps, not a field of the runtime's.
func TestTasksResumeAutoNothingLeft(t *testing.T) {
	dir := t.TempDir()
	model, _, plan := twoTower(t, dir)
	ck := filepath.Join(dir, "ck")
	args := []string{plan, "--model", model, "--steps", "4", "--checkpoint", ck, "--checkpoint-every", "2"}
	if code, _, errs := gp(t, "", append([]string{"run"}, args...)...); code != 0 {
		t.Fatal(errs)
	}
	port := freePort(t)
	auto := append(args, "--resume", "auto")
	var procs []*runProc
	for _, rank := range []int{2, 1, 0} {
		procs = append(procs, task(t, dir, torchrun(rank, 3, port), auto...))
	}
	said := "--resume auto: the checkpoint in " + ck + " is at step 4, --steps 4: nothing left to do"
	for i, p := range procs {
		if code := p.exitCode(t, 30*time.Second); code != 0 || !strings.Contains(p.errs(), said) {
			t.Fatalf("rank %d exited %d, want 0 and %q:\n%s", 2-i, code, said, p.errs())
		}
	}
	code, _, errs := gp(t, "", append([]string{"run", "--resume", ck}, args...)...)
	if want := "--resume " + ck + ": the checkpoint is at step 4, and --steps is 4: nothing is left to train"; code != 2 || !strings.Contains(errs, want) {
		t.Fatalf("--resume at --steps: exit %d, %q; want 2 and %q", code, errs, want)
	}
}
