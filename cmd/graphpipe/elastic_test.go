package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// coordProc is graphpipe run as a process of its own (this test binary),
// its stdout and stderr kept.
type coordProc struct {
	agentProc
	out bytes.Buffer
}

// startPoolRun starts graphpipe run args on p's pool, --json.
func (p *testPool) startRun(t *testing.T, pool string, args ...string) *coordProc {
	t.Helper()
	self, _ := os.Executable()
	args = append(append([]string{"run"}, args...), "--nats", p.url, "--nats-token", p.token, "--workers", "pool:"+pool, "--json")
	c := &coordProc{}
	c.cmd = exec.Command(self, args...)
	c.cmd.Env = append(os.Environ(), "GRAPHPIPE_TEST_MAIN=1")
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.agentProc
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.cmd.Process.Kill()
		c.cmd.Wait()
	})
	return c
}

// wait waits for the run's end (within limit) and returns its summary.
func (c *coordProc) wait(t *testing.T, limit time.Duration) runSummary {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v:\n%s", err, c.stderr())
		}
	case <-time.After(limit):
		c.cmd.Process.Kill()
		<-done
		t.Fatalf("run still going after %v:\n%s", limit, c.stderr())
	}
	var sum runSummary
	if err := json.Unmarshal(c.out.Bytes(), &sum); err != nil {
		t.Fatalf("summary: %v: %s", err, c.out.String())
	}
	return sum
}

// waitLog waits up to limit for text in the run's stderr.
func (c *coordProc) waitLog(t *testing.T, text string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !strings.Contains(c.stderr(), text) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q within %v:\n%s", text, limit, c.stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serving is the agents of run's generation gen (their pids), as they say.
func serving(agents []*agentProc, run string, gen int) []*agentProc {
	var out []*agentProc
	for _, a := range agents {
		if strings.Contains(a.stderr(), "joined run "+run+" (generation "+strconv.Itoa(gen)+")") {
			out = append(out, a)
		}
	}
	return out
}

// elasticSetup is a 3-device plan of the small MMT, micro-batch forced,
// and the parameters an uninterrupted local run of it ends with.
func elasticSetup(t *testing.T, steps string) (dir, model, plan string, want map[string][]float32) {
	model = smallModel(t, "mmt")
	dir = t.TempDir()
	plan = filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "3", "--device", "cpu", "--micro-batch", "4", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	if code, _, errs := gp(t, "", "run", plan, "--model", model, "--steps", steps, "--optimizer", "adam", "--dump", filepath.Join(dir, "straight")); code != 0 {
		t.Fatal(errs)
	}
	return dir, model, plan, readParams(t, filepath.Join(dir, "straight", "final.safetensors"))
}

// TestPoolRestartWithSpare: an agent SIGKILLed mid-run, with --restarts and
// a spare agent in the pool: the survivors and the spare resume from the
// last checkpoint, and the run ends bit-identical to an uninterrupted one;
// --json reports the recovery per phase, and no re-plan.
func TestPoolRestartWithSpare(t *testing.T) {
	const steps = "300"
	dir, model, plan, want := elasticSetup(t, steps)
	p := newTestPool(t)
	var agents []*agentProc
	for range 4 {
		agents = append(agents, p.agent(t, "spare", ""))
	}
	ck := filepath.Join(dir, "ck")
	c := p.startRun(t, "spare", plan, "--model", model, "--steps", steps, "--optimizer", "adam", "--restarts", "2",
		"--checkpoint", ck, "--checkpoint-every", "10", "--heartbeat-timeout", "1500ms", "--dump", filepath.Join(dir, "killed"), "--run", "spare1")
	waitCheckpoint(t, ck)
	victims := serving(agents, "spare1", 1)
	if len(victims) != 3 {
		t.Fatalf("%d agents say they serve generation 1, want 3", len(victims))
	}
	syscall.Kill(victims[1].cmd.Process.Pid, syscall.SIGKILL)
	sum := c.wait(t, 60*time.Second)
	sameParams(t, readParams(t, filepath.Join(dir, "killed", "final.safetensors")), want, 0)
	if len(sum.Recoveries) != 1 || len(sum.Replans) != 0 || sum.Recoveries[0].To.Devices != 3 {
		t.Fatalf("recoveries %+v, replans %+v: want one restart on 3 devices", sum.Recoveries, sum.Replans)
	}
	r := sum.Recoveries[0]
	if r.Seconds.Detect < 1.5 || r.Seconds.Total < r.Seconds.Detect || !strings.Contains(c.stderr(), "training again at step") {
		t.Fatalf("recovery %+v:\n%s", r, c.stderr())
	}
	if len(serving(agents, "spare1", 2)) != 3 {
		t.Fatalf("generation 2 did not run on the 2 survivors and the spare:\n%s", c.stderr())
	}
	t.Logf("recovery at step %d: %s", r.Step, r.Seconds)
}

// TestElasticReplan: two of three working agents SIGKILLed at once with one
// spare, --elastic: no second spare comes within --replace-wait, so the run
// re-plans onto the 2 agents left and goes on from the last checkpoint;
// an agent started then makes it grow back to the first plan at the next
// checkpoint. It ends within 1e-5 of the uninterrupted run (the
// micro-batch is forced), and --json's replans say 3 -> 2 -> 3 devices.
func TestElasticReplan(t *testing.T) {
	const steps = "400"
	dir, model, plan, want := elasticSetup(t, steps)
	p := newTestPool(t)
	var agents []*agentProc
	for range 4 {
		agents = append(agents, p.agent(t, "shrink", ""))
	}
	ck := filepath.Join(dir, "ck")
	c := p.startRun(t, "shrink", plan, "--model", model, "--steps", steps, "--optimizer", "adam", "--restarts", "3", "--elastic",
		"--replace-wait", "1s", "--checkpoint", ck, "--checkpoint-every", "10", "--heartbeat-timeout", "1500ms",
		"--dump", filepath.Join(dir, "elastic"), "--run", "shrink1")
	waitCheckpoint(t, ck)
	victims := serving(agents, "shrink1", 1)
	if len(victims) != 3 {
		t.Fatalf("%d agents say they serve generation 1, want 3", len(victims))
	}
	syscall.Kill(victims[0].cmd.Process.Pid, syscall.SIGKILL)
	syscall.Kill(victims[2].cmd.Process.Pid, syscall.SIGKILL)
	c.waitLog(t, "graphpipe: re-planned at step", 30*time.Second)
	p.agent(t, "shrink", "")
	sum := c.wait(t, 60*time.Second)
	worst := sameParams(t, readParams(t, filepath.Join(dir, "elastic", "final.safetensors")), want, 1e-5)
	if len(sum.Replans) != 2 {
		t.Fatalf("replans %+v, want 3 -> 2 -> 3 devices:\n%s", sum.Replans, c.stderr())
	}
	down, up := sum.Replans[0], sum.Replans[1]
	if down.From.Devices != 3 || down.To.Devices != 2 || up.From.Devices != 2 || up.To.Devices != 3 || down.Seconds.Wait < 1 {
		t.Fatalf("replans %+v, want 3 -> 2 (after a 1 s wait) -> 3 devices", sum.Replans)
	}
	if sum.Stages != 3 {
		t.Fatalf("the run ended on %d stages, want the first plan's 3", sum.Stages)
	}
	t.Logf("re-planned at step %d: %+v -> %+v (%s); grew back at step %d; worst relative difference %.3g", down.Step, down.From, down.To, down.Seconds, up.Step, worst)
}
