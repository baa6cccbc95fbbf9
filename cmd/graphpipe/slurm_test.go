package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/internal/slurmcluster"
)

// readmeSbatch is the sbatch script README.md shows: the block whose info
// string says it is one.
func readmeSbatch(t *testing.T) string {
	t.Helper()
	md, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const open = "```bash readme-skip: an sbatch script"
	_, rest, ok := strings.Cut(string(md), open)
	if !ok {
		t.Fatalf("README.md shows no block opening %q", open)
	}
	_, rest, _ = strings.Cut(rest, "\n")
	script, _, ok := strings.Cut(rest, "\n```")
	if !ok || !strings.HasPrefix(script, "#!/bin/bash\n#SBATCH") {
		t.Fatalf("README.md's sbatch block is not a script:\n%s", script)
	}
	return script + "\n"
}

// slurmRun is the files every job of TestSlurm shares: the imported
// two-tower model, its weights, a 3-device plan, the README's script, and
// a directory on the PATH whose graphpipe is this test binary (TestMain
// runs it as graphpipe: GRAPHPIPE_TEST_MAIN, which sbatch passes on).
type slurmRun struct {
	c          *slurmcluster.Cluster
	dir, bin   string
	local      map[int]string // steps -> a local run's final parameters
	scriptText string
}

// job is one sbatch of the README's script with args, in a directory of
// its own holding the shared files.
type job struct {
	r      *slurmRun
	dir    string
	prefix string // of its log's name: PREFIX-ID.log
	cmd    *exec.Cmd
	out    bytes.Buffer
}

func (r *slurmRun) submit(t *testing.T, name string, args ...string) *job {
	t.Helper()
	j := &job{r: r, dir: filepath.Join(r.dir, name), prefix: "two-tower"}
	if err := os.Mkdir(j.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"two-tower.json", "two-tower.safetensors", "plan.json", "two-tower.sbatch"} {
		if err := os.Link(filepath.Join(r.dir, f), filepath.Join(j.dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	j.start(t, "two-tower.sbatch", args...)
	return j
}

// start submits the job's script with args and waits for nothing.
func (j *job) start(t *testing.T, script string, args ...string) {
	t.Helper()
	r := j.r
	// the node has the machine's CPUs, fewer than 3 maybe: --overcommit
	j.cmd = r.c.Command("sbatch", append([]string{"--wait", "--overcommit", "--chdir", j.dir, script}, args...)...)
	j.cmd.Dir = j.dir
	j.cmd.Env = append(j.cmd.Env, "PATH="+r.bin+string(os.PathListSeparator)+os.Getenv("PATH"), "GRAPHPIPE_TEST_MAIN=1")
	j.cmd.Stdout, j.cmd.Stderr = &j.out, &j.out
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.cmd.Process.Kill(); j.cmd.Wait() })
}

// id is the job's id, from its log file's name (PREFIX-ID.log).
func (j *job) id(t *testing.T) string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		logs, _ := filepath.Glob(filepath.Join(j.dir, j.prefix+"-*.log"))
		if len(logs) == 1 {
			return strings.TrimSuffix(strings.TrimPrefix(filepath.Base(logs[0]), j.prefix+"-"), ".log")
		}
	}
	t.Fatalf("the job wrote no log in 30 s; sbatch said %s\n%s", j.out.String(), j.r.c.Logs())
	return ""
}

// log is the job's log so far.
func (j *job) log(t *testing.T) string {
	data, _ := os.ReadFile(filepath.Join(j.dir, j.prefix+"-"+j.id(t)+".log"))
	return string(data)
}

// waitLog waits until the job's log says what.
func (j *job) waitLog(t *testing.T, what string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(j.log(t), what) {
			return
		}
	}
	t.Fatalf("the job's log never said %q:\n%s", what, j.log(t))
}

// wait waits for sbatch --wait to return, and for the job to leave
// squeue and every process of it the process table; it returns sbatch's
// exit status.
func (j *job) wait(t *testing.T) int {
	t.Helper()
	done := make(chan struct{})
	go func() { j.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		t.Fatalf("sbatch --wait still waiting after 90 s; the job's log:\n%s\nsqueue:\n%s", j.log(t), j.r.c.Jobs())
	}
	var jobs, left string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if jobs, left = j.r.c.Jobs(), j.r.c.Leftovers(); jobs == "" && left == "" {
			return j.cmd.ProcessState.ExitCode()
		}
	}
	t.Fatalf("after the job: squeue lists\n%s\nand these processes are left:\n%s", jobs, left)
	return 0
}

// final is the job's final parameters, as its --dump wrote them.
func (j *job) final(t *testing.T) map[string][]float32 {
	t.Helper()
	path := filepath.Join(j.dir, "final", "final.safetensors")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no %s: %v; the job's log:\n%s", path, err, j.log(t))
	}
	return readParams(t, path)
}

// localFinal is the final parameters of a local run of the script's
// command for steps steps.
func (r *slurmRun) localFinal(t *testing.T, steps int) map[string][]float32 {
	t.Helper()
	if r.local[steps] == "" {
		dump := filepath.Join(r.dir, fmt.Sprint("local-", steps))
		d := func(f string) string { return filepath.Join(r.dir, f) }
		if code, _, errs := gp(t, "", "run", d("plan.json"), "--model", d("two-tower.json"), "--init", d("two-tower.safetensors"), "--steps", strconv.Itoa(steps),
			"--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9", "--dump", dump, "--workers", "local"); code != 0 {
			t.Fatal(errs)
		}
		r.local[steps] = filepath.Join(dump, "final.safetensors")
	}
	return readParams(t, r.local[steps])
}

// TestSlurm submits README.md's sbatch script to a one-node Slurm cluster
// of the test's own, 3 tasks training the two-tower model imported from
// onnx/testdata on a 3-device plan:
//   - run through, its parameters equal a local run's of the same plan, bit
//     for bit;
//   - sent the warning mid-run (scancel --signal=TERM --batch), it
//     checkpoints at the step reached, requeues itself, resumes with
//     --resume auto and ends bit-identical to an uninterrupted run, its log
//     saying where it stopped and where it resumed;
//   - a task SIGKILLed mid-run is replaced within the allocation and the
//     run resumes from the last checkpoint, ending bit-identical.
//
// After each job squeue lists nothing and no process of it is left.
func TestSlurm(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a Slurm cluster of its own (munged, slurmctld, slurmd); make check runs it")
	}
	c := slurmcluster.Start(t)
	r := &slurmRun{c: c, dir: t.TempDir(), local: map[int]string{}}
	r.bin = filepath.Join(r.dir, "bin")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(r.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(r.bin, "graphpipe")); err != nil {
		t.Fatal(err)
	}
	d := func(f string) string { return filepath.Join(r.dir, f) }
	if code, _, errs := gp(t, "", "import", "../../onnx/testdata/models/two_tower.onnx", "-o", d("two-tower.json"), "--weights", d("two-tower.safetensors"),
		"--loss", "softmax_cross_entropy", "--batch", "12"); code != 0 {
		t.Fatal(errs)
	}
	if code, _, errs := gp(t, "", "search", d("two-tower.json"), "--devices", "3", "--device", "cpu", "--micro-batch", "4", "-o", d("plan.json")); code != 0 {
		t.Fatal(errs)
	}
	if err := os.WriteFile(d("two-tower.sbatch"), []byte(readmeSbatch(t)), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Run("RunThrough", r.runThrough)
	t.Run("Preempted", r.preempted)
	t.Run("TaskKilled", r.taskKilled)
	t.Run("Sweep", r.sweep)
	t.Run("SweepTaskKilled", r.sweepTaskKilled)
}

// runThrough: the script as it is, 8 steps.
func (r *slurmRun) runThrough(t *testing.T) {
	j := r.submit(t, "through", "--steps", "8")
	if code := j.wait(t); code != 0 {
		t.Fatalf("sbatch --wait exited %d: %s\nthe job's log:\n%s", code, j.out.String(), j.log(t))
	}
	log := j.log(t)
	if !strings.Contains(log, "task 0 of 3 (SLURM_PROCID 0) coordinates run slurm-"+j.id(t)) || strings.Count(log, "joining generation 1 of run") != 2 {
		t.Fatalf("the log does not say task 0 coordinates and 2 tasks join:\n%s", log)
	}
	sameParams(t, j.final(t), r.localFinal(t, 8), 0)
	if rv, _ := filepath.Glob(filepath.Join(j.dir, ".graphpipe-*")); len(rv) != 0 {
		t.Fatalf("the rendezvous file is left: %v", rv)
	}
}

// preempted: the warning as soon as step 3 is logged.
func (r *slurmRun) preempted(t *testing.T) {
	j := r.submit(t, "preempted", "--log-every", "1")
	j.waitLog(t, "step 3/200")
	if out, err := r.c.Command("scancel", "--signal=TERM", "--batch", j.id(t)).CombinedOutput(); err != nil {
		t.Fatalf("scancel: %v: %s", err, out)
	}
	if code := j.wait(t); code != 0 {
		t.Fatalf("sbatch --wait exited %d: %s\nthe job's log:\n%s", code, j.out.String(), j.log(t))
	}
	log := j.log(t)
	stopped := regexp.MustCompile(`graphpipe: stopped at step (\d+); checkpoint step-\d+ in ckpt`).FindStringSubmatch(log)
	if stopped == nil || stopped[1] == "200" {
		t.Fatalf("the log does not say the run stopped mid-way at a checkpoint:\n%s", log)
	}
	if resumed := "resuming at step " + stopped[1] + " from ckpt"; !strings.Contains(log, resumed) || !strings.Contains(log, "--resume auto: no checkpoint in ckpt yet: starting at step 0") {
		t.Fatalf("the log does not say %q after a fresh start:\n%s", resumed, log)
	}
	sameParams(t, j.final(t), r.localFinal(t, 200), 0)
	t.Logf("stopped at step %s, requeued, resumed there: bit-identical", stopped[1])
}

// taskKilled: task 2 SIGKILLed once step 12 is logged (a checkpoint every
// 5 steps, a task silent for 1 s lost).
func (r *slurmRun) taskKilled(t *testing.T) {
	j := r.submit(t, "killed", "--log-every", "1", "--checkpoint-every", "5", "--heartbeat-timeout", "1s")
	j.waitLog(t, "step 12/200")
	pid := taskPID(t, j.id(t), 2)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	code := j.wait(t) // srun's status is the killed task's; the run's own is task 0's
	log := j.log(t)
	host, _ := os.Hostname()
	if !strings.Contains(log, fmt.Sprintf("task 2 (SLURM_PROCID 2, host %s, pid %d) is gone: device 2 of the plan gets a worker started in its place", host, pid)) ||
		!strings.Contains(log, "restarting the workers as generation 2 from the checkpoint at step") {
		t.Fatalf("sbatch exited %d; the log does not say task 2 was replaced and the run resumed:\n%s", code, log)
	}
	sameParams(t, j.final(t), r.localFinal(t, 200), 0)
	t.Logf("task 2 (pid %d) killed, replaced; sbatch exited %d; bit-identical", pid, code)
}

// taskPID is the pid of task rank of job id's first step: the graphpipe
// process whose environment says so.
func taskPID(t *testing.T, id string, rank int) int {
	t.Helper()
	return taskPIDOf(t, id, rank, "\x00run\x00plan.json\x00")
}

// taskPIDOf is taskPID for tasks whose command line holds cmdline.
func taskPIDOf(t *testing.T, id string, rank int, cmdline string) int {
	t.Helper()
	want := [][]byte{[]byte("SLURM_JOB_ID=" + id + "\x00"), []byte(fmt.Sprintf("SLURM_PROCID=%d\x00", rank)), []byte("SLURM_STEP_ID=0\x00")}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if !bytes.Contains(cmd, []byte(cmdline)) {
			continue
		}
		env, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		found := true
		for _, w := range want {
			found = found && bytes.Contains(env, w)
		}
		if found {
			return pid
		}
	}
	t.Fatalf("no task %d of job %s in the process table", rank, id)
	return 0
}
