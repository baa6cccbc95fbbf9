package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/runtime"
)

// coordProc is graphpipe run as a process of its own (this test binary),
// its stdout and stderr kept.
type coordProc struct {
	agentProc
	out  bytes.Buffer
	done chan struct{} // closed when it has exited
	err  error         // its exit, once done
}

// startRun starts graphpipe run args on p's pool, --json.
func (p *testPool) startRun(t testing.TB, pool string, args ...string) *coordProc {
	t.Helper()
	self, _ := os.Executable()
	args = append(append(append([]string{"run"}, args...), p.coordArgs()...), "--workers", "pool:"+pool, "--json")
	c := &coordProc{done: make(chan struct{})}
	c.cmd = exec.Command(self, args...)
	c.cmd.Env = append(os.Environ(), "GRAPHPIPE_TEST_MAIN=1")
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.agentProc
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.err = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		c.cmd.Process.Kill()
		<-c.done
	})
	return c
}

// wait waits for the run's end (within limit) and returns its summary.
func (c *coordProc) wait(t testing.TB, limit time.Duration) runSummary {
	t.Helper()
	if code := c.waitCode(t, limit); code != 0 {
		t.Fatalf("run: %v:\n%s", c.err, c.stderr())
	}
	var sum runSummary
	if err := json.Unmarshal(c.out.Bytes(), &sum); err != nil {
		t.Fatalf("summary: %v: %s", err, c.out.String())
	}
	return sum
}

// waitLog waits up to limit for text in the run's stderr.
func (c *coordProc) waitLog(t testing.TB, text string, limit time.Duration) {
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
func elasticSetup(t testing.TB, steps string) (dir, model, plan string, want map[string][]float32) {
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
// a spare agent in the pool (the 4 agents spread over the nodes of a NATS
// cluster): the survivors and the spare resume from the last checkpoint,
// and the run ends bit-identical to an uninterrupted one, leaving no
// process or subscription behind; --json reports the recovery per phase,
// and no re-plan.
func TestPoolRestartWithSpare(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a pool losing agents and restarting; make check runs it")
	}
	const steps = "300"
	dir, model, plan, want := elasticSetup(t, steps)
	p := newTestPool(t)
	var agents []*agentProc
	for range 4 {
		agents = append(agents, p.agent(t, "spare", ""))
	}
	per := p.spread(t, "spare", agents)
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
	p.clean(t, "spare1", "spare")
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
	if strings.Contains(c.stderr(), "did not confirm") {
		t.Fatalf("the dead agent was offered a slot of generation 2:\n%s", c.stderr())
	}
	t.Log(recoveryLines(c.stderr()))
	t.Logf("agents per NATS node %v, the killed one on node %d; recovery at step %d: %s", per, victims[1].node+1, r.Step, r.Seconds)
}

// TestElasticReplan: two of three working agents SIGKILLed at once with one
// spare, --elastic: no second spare comes within --replace-wait, so the run
// re-plans onto the 2 agents left and goes on from the last checkpoint;
// an agent started then makes it grow back to the first plan at the next
// checkpoint. It ends within 1e-5 of the uninterrupted run (the
// micro-batch is forced), and --json's replans say 3 -> 2 -> 3 devices.
// The agents are spread over the nodes of a NATS cluster; the run leaves
// no process or subscription behind.
func TestElasticReplan(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a pool shrinking and growing back; make check runs it")
	}
	const steps = "400"
	dir, model, plan, want := elasticSetup(t, steps)
	p := newTestPool(t)
	var agents []*agentProc
	for range 4 {
		agents = append(agents, p.agent(t, "shrink", ""))
	}
	per := p.spread(t, "shrink", agents)
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
	p.clean(t, "shrink1", "shrink")
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
	t.Log(recoveryLines(c.stderr()))
	t.Logf("agents per NATS node %v, the killed ones on nodes %d and %d", per, victims[0].node+1, victims[2].node+1)
	t.Logf("re-planned at step %d: %+v -> %+v (%s); grew back at step %d; worst relative difference %.3g", down.Step, down.From, down.To, down.Seconds, up.Step, worst)
}

// recoveryLines are the lines of a run's stderr about its recoveries.
func recoveryLines(errs string) string {
	var out []string
	for _, l := range strings.Split(errs, "\n") {
		if strings.HasPrefix(l, "graphpipe: ") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// poolPIDs are the agents' pids the run's last placement names (its
// "pool NAME: node N on host H: worker W (stage S) on agent ID (pid P, ...)"
// lines of the latest generation).
func poolPIDs(errs, pool string) []int {
	var last []int
	for _, l := range strings.Split(errs, "\n") {
		if !strings.HasPrefix(l, "pool "+pool+": node ") {
			continue
		}
		if strings.HasPrefix(l, "pool "+pool+": node 0 ") {
			last = nil
		}
		for _, f := range strings.Split(l, "(pid ")[1:] {
			if pid, err := strconv.Atoi(strings.SplitN(f, ",", 2)[0]); err == nil {
				last = append(last, pid)
			}
		}
	}
	return last
}

// TestRandomFaults: runs on a pool with --elastic, its agents spread over
// the nodes of a 3-node NATS cluster, each run hit by random faults while
// training, one at a time, on a pool of as many agents as the plan has
// devices:
//
//   - kill: an agent SIGKILLed, a new one started 0-2 s later, before or
//     after --replace-wait 1s (replaced, or re-planned around and grown
//     back onto);
//   - stop: an agent SIGSTOPped past the heartbeat timeout (re-planned
//     around), then 3 s later SIGCONTed (and grown back onto) or SIGKILLed
//     (and a new one started);
//   - node: the NATS node of some of the run's agents killed, and started
//     again 0.5-2 s later, so that the cluster stays at 3 (its clients move
//     to the others).
//
// Every run ends with the uninterrupted run's parameters (within 1e-5:
// re-plans change the micro-batches' grouping, not their size) or with a
// clear error, and leaves no process (but the agents started) and no
// subscription under its subjects on any node (testPool.clean); no agent
// process outlives the test. Short: 1 run of 3 faults, one of each kind;
// GRAPHPIPE_FAULTS=long: 5 runs of 4 of random kinds (make fuzz).
func TestRandomFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: faults at random on a pool; make check runs it")
	}
	runs, faults := 1, 3
	long := os.Getenv("GRAPHPIPE_FAULTS") == "long"
	if long {
		runs, faults = 5, 4
	}
	const steps = 500
	dir, model, plan, want := elasticSetup(t, strconv.Itoa(steps))
	seed := time.Now().UnixNano()
	if s, err := strconv.ParseInt(os.Getenv("GRAPHPIPE_FAULTS_SEED"), 10, 64); err == nil {
		seed = s // a failure's faults again
	}
	t.Logf("faults from seed %d (GRAPHPIPE_FAULTS_SEED=%[1]d repeats them)", seed)
	rng := rand.New(rand.NewSource(seed))
	p := newTestPool(t)
	kinds := []string{"kill", "stop", "node"}
	if p.cluster == nil {
		kinds = kinds[:2]
	}
	ok, failed := 0, 0
	for run := range runs {
		pool := fmt.Sprint("faults", run)
		var agents []*agentProc
		for range 3 { // no spare: a lost agent is replaced by the next started, or re-planned around
			agents = append(agents, p.agent(t, pool, ""))
		}
		p.spread(t, pool, agents)
		ck := filepath.Join(dir, fmt.Sprint("ck", run))
		out := filepath.Join(dir, fmt.Sprint("out", run))
		c := p.startRun(t, pool, plan, "--model", model, "--steps", strconv.Itoa(steps), "--optimizer", "adam", "--restarts", "10", "--elastic",
			"--replace-wait", "1s", "--checkpoint", ck, "--checkpoint-every", "10", "--heartbeat-timeout", "1500ms", "--dump", out, "--run", pool)
		order := make([]string, faults)
		for f, i := range rng.Perm(faults) {
			order[f] = kinds[i%len(kinds)]
			if long {
				order[f] = kinds[rng.Intn(len(kinds))]
			}
		}
		var after sync.WaitGroup // the faults' aftermath: agents continued, killed, started
		for f, kind := range order {
			at := (f+1)*steps/(faults+2) + rng.Intn(steps/(faults+2)/2)
			if !c.waitStepOrEnd(t, ck, at) {
				break
			}
			restarts := strings.Count(c.stderr(), "restarting the workers as generation")
			switch kind {
			case "kill", "stop":
				pids := poolPIDs(c.stderr(), pool)
				if len(pids) == 0 {
					t.Fatalf("run %d: no placement:\n%s", run, c.stderr())
				}
				victim := pids[rng.Intn(len(pids))]
				fate := p.fault(t, &after, pool, victim, kind, rng)
				t.Logf("run %d, fault %d at step %d (checkpoint %d): %s agent pid %d%s", run, f, at, lastCheckpoint(ck), kind, victim, fate)
				c.waitCount(t, "restarting the workers as generation", restarts+1, 30*time.Second)
			case "node":
				node, per := p.nodeOfPool(t, pool, rng)
				cp := lastCheckpoint(ck)
				p.cluster.Kill(node)
				down := time.Duration(500+rng.Intn(1500)) * time.Millisecond
				time.Sleep(down)
				p.cluster.Restart(node)
				t.Logf("run %d, fault %d at step %d (checkpoint %d): NATS node %d killed (agents of the pool per node %v), restarted %v later", run, f, at, cp, node+1, per, down)
			}
		}
		code := c.waitCode(t, 90*time.Second)
		after.Wait()
		errs := c.stderr()
		if strings.Contains(errs, "panic:") || strings.Contains(errs, "goroutine ") {
			t.Fatalf("run %d crashed:\n%s", run, errs)
		}
		t.Logf("run %d's coordinator:\n%s", run, faultLines(errs, pool))
		p.clean(t, pool, pool)
		if code != 0 {
			lines := strings.Split(strings.TrimSpace(errs), "\n")
			t.Logf("run %d ended with exit %d: %s", run, code, lines[len(lines)-1])
			failed++
			continue
		}
		sameParams(t, readParams(t, filepath.Join(out, "final.safetensors")), want, 1e-5)
		var sum runSummary
		json.Unmarshal(c.out.Bytes(), &sum)
		t.Logf("run %d: right parameters after %d recoveries (%d re-plans); no process or subscription left", run, len(sum.Recoveries), len(sum.Replans))
		for _, r := range sum.Recoveries {
			t.Logf("  step %d: %d -> %d devices, %s", r.Step, r.From.Devices, r.To.Devices, r.Seconds)
		}
		ok++
	}
	if ok == 0 {
		t.Fatalf("no run survived its faults (%d ended with an error)", failed)
	}
	p.mu.Lock()
	all := slices.Clone(p.agents)
	p.mu.Unlock()
	for _, a := range all {
		syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT)
		a.cmd.Process.Kill()
		a.cmd.Wait()
	}
	if left := poolAgentPIDs("faults"); len(left) > 0 {
		t.Fatalf("agent processes %v outlived the test", left)
	}
}

// fault kills (kind "kill") or stops ("stop") an agent of pool: a killed
// one is followed by a new agent 0-2 s later; a stopped one, 3 s later, is
// continued or killed (and followed by a new agent). after counts what is
// still to come; it returns what will come, for the log.
func (p *testPool) fault(t testing.TB, after *sync.WaitGroup, pool string, victim int, kind string, rng *rand.Rand) string {
	replace := func() {
		p.agent(t, pool, "")
		after.Done()
	}
	after.Add(1)
	if kind == "kill" {
		syscall.Kill(victim, syscall.SIGKILL)
		delay := time.Duration(rng.Intn(2000)) * time.Millisecond
		time.AfterFunc(delay, replace)
		return fmt.Sprintf(", a new agent %v later", delay)
	}
	syscall.Kill(victim, syscall.SIGSTOP)
	cont := rng.Intn(2) == 0
	time.AfterFunc(3*time.Second, func() {
		if cont {
			syscall.Kill(victim, syscall.SIGCONT)
			after.Done()
			return
		}
		syscall.Kill(victim, syscall.SIGKILL)
		replace()
	})
	if cont {
		return ", continued 3 s later"
	}
	return ", killed 3 s later and a new agent started"
}

// lastCheckpoint is the step of the checkpoint in ck now (-1: none).
func lastCheckpoint(ck string) int {
	if cp, err := runtime.LoadCheckpoint(ck, nil); err == nil {
		return cp.Manifest.Step
	}
	return -1
}

// faultLines are the lines of a run's stderr about its faults: losses,
// restarts, re-plans, placements, reconnections.
func faultLines(errs, pool string) string {
	var out []string
	for _, l := range strings.Split(errs, "\n") {
		if strings.HasPrefix(l, "graphpipe: ") || strings.HasPrefix(l, "pool "+pool+": ") {
			out = append(out, "  "+l)
		}
	}
	return strings.Join(out, "\n")
}

// nodeOfPool is a random live node that has agents of pool connected, and
// the pool's agents per node.
func (p *testPool) nodeOfPool(t testing.TB, pool string, rng *rand.Rand) (int, []int) {
	t.Helper()
	per := p.agentsPerNode(t, pool)
	var nodes []int
	for i, n := range per {
		if n > 0 {
			nodes = append(nodes, i)
		}
	}
	if len(nodes) == 0 {
		t.Fatalf("no node has agents of pool %s", pool)
	}
	return nodes[rng.Intn(len(nodes))], per
}

// waitCount waits up to limit for n times text in the run's stderr.
func (c *coordProc) waitCount(t testing.TB, text string, n int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for strings.Count(c.stderr(), text) < n {
		if time.Now().After(deadline) {
			t.Fatalf("not %d times %q within %v:\n%s", n, text, limit, c.stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitCode waits for the run's end (within limit) and returns its exit
// status.
func (c *coordProc) waitCode(t testing.TB, limit time.Duration) int {
	t.Helper()
	select {
	case <-c.done:
		return c.cmd.ProcessState.ExitCode()
	case <-time.After(limit):
		// where it is stuck: Go prints every goroutine's stack on SIGQUIT
		c.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
			c.cmd.Process.Kill()
			<-c.done
		}
		t.Fatalf("run still going after %v (its goroutines at the end of its stderr):\n%s", limit, c.stderr())
	}
	return -1
}

// waitStepOrEnd waits until the run's checkpoint in ck has reached step
// (true), or the run has ended (false).
func (c *coordProc) waitStepOrEnd(t testing.TB, ck string, step int) bool {
	t.Helper()
	for {
		select {
		case <-c.done:
			return false
		default:
		}
		if cp, err := runtime.LoadCheckpoint(ck, nil); err == nil && cp.Manifest.Step >= step {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// poolAgentPIDs are the live processes (not zombies) of agents of pools
// whose name starts with prefix, from /proc.
func poolAgentPIDs(prefix string) []int {
	return pidsWhere(func(args []string) bool {
		for i, a := range args {
			if a == "--pool" && i+1 < len(args) && strings.HasPrefix(args[i+1], prefix) {
				return true
			}
		}
		return false
	})
}

// Phases are a recovery's seconds as the run printed them.
type Phases struct {
	Detect, Stop, Wait, Replan, Resume, Total float64
}

func (p *Phases) add(q Phases) {
	p.Detect, p.Stop, p.Wait, p.Replan, p.Resume, p.Total = p.Detect+q.Detect, p.Stop+q.Stop, p.Wait+q.Wait, p.Replan+q.Replan, p.Resume+q.Resume, p.Total+q.Total
}

// parseRecovery reads the first "training again" line of a run's stderr.
func parseRecovery(errs string) (Phases, error) {
	var p Phases
	var step int
	for _, l := range strings.Split(errs, "\n") {
		if _, err := fmt.Sscanf(l, "graphpipe: training again at step %d, %f s after the loss (detection %f s, stop %f s, wait for a spare %f s, re-plan %f s, resume %f s)",
			&step, &p.Total, &p.Detect, &p.Stop, &p.Wait, &p.Replan, &p.Resume); err == nil {
			return p, nil
		}
	}
	return p, fmt.Errorf("no recovery line in:\n%s", errs)
}

// TestElasticFlagErrors: what --restarts, --elastic, --replace-wait and
// --heartbeat-timeout cannot do is refused, exit 2, in one line naming the
// flag (and the usual pointer to --help), before anything starts.
func TestElasticFlagErrors(t *testing.T) {
	model := smallModel(t, "mlp")
	base := []string{"run", model, "--devices", "2", "--device", "cpu", "--steps", "2"}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--elastic", "--restarts", "1"}, "--elastic: re-planning counts the agents of a pool"},
		{[]string{"--workers", "pool:p", "--nats", "nats://127.0.0.1:1", "--elastic"}, "--elastic: a re-plan is a restart"},
		{[]string{"--workers", "external", "--restarts", "1"}, "--restarts: workers started elsewhere"},
		{[]string{"--restarts", "-1"}, "--restarts: must be at least 0"},
		{[]string{"--replace-wait", "5s"}, "--replace-wait: only --elastic"},
		{[]string{"--workers", "pool:p", "--nats", "nats://127.0.0.1:1", "--elastic", "--restarts", "1", "--replace-wait", "-1s"}, "--replace-wait: must be at least 0"},
		{[]string{"--heartbeat-timeout", "100ms"}, "--heartbeat-timeout: must be at least 1s"},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			code, _, errs := gp(t, "", append(base, c.args...)...)
			first, _, _ := strings.Cut(errs, "\n")
			if code != 2 || !strings.HasPrefix(first, "graphpipe: "+c.want) || strings.Count(errs, "graphpipe: ") != 1 {
				t.Fatalf("exit %d: %q", code, errs)
			}
		})
	}
}
