package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// run runs graphpipe run with args on pool's agents, --json.
func (p *testPool) run(t *testing.T, pool string, args ...string) (int, runSummary, string) {
	t.Helper()
	args = append(append(append([]string{"run"}, args...), p.coordArgs()...), "--workers", "pool:"+pool, "--json")
	code, out, errs := gp(t, "", args...)
	var sum runSummary
	if code == 0 {
		if err := json.Unmarshal([]byte(out), &sum); err != nil {
			t.Fatalf("summary: %v: %s", err, out)
		}
	}
	return code, sum, errs
}

func pidsOf(sum runSummary) map[int]bool {
	out := map[int]bool{}
	for _, a := range sum.Assignment {
		out[a.PID] = true
	}
	return out
}

// TestPoolRunsStayAndSkipTheDead: a run on a pool of 3 agents, spread over
// the nodes of a NATS cluster (testPool), ends with the parameters of a
// local run of the same plan, bit for bit, and leaves no process or
// subscription behind; the agents stay and serve a second run; after one is SIGKILLed, a third run counts
// only the 2 live ones and waits for a newly started agent instead.
// (runtime's TestPoolSkipsSilentAgents covers an agent that dies after the
// coordinator heard it.)
func TestPoolRunsStayAndSkipTheDead(t *testing.T) {
	model := smallModel(t, "mmt")
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "3", "--device", "cpu", "--micro-batch", "4", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	base := []string{plan, "--model", model, "--steps", "4", "--optimizer", "adam"}
	if code, _, errs := gp(t, "", append(append([]string{"run"}, base...), "--dump", filepath.Join(dir, "local"))...); code != 0 {
		t.Fatal(errs)
	}
	want := readParams(t, filepath.Join(dir, "local", "final.safetensors"))
	p := newTestPool(t)
	agents := []*agentProc{p.agent(t, "stay", ""), p.agent(t, "stay", ""), p.agent(t, "stay", "")}
	t.Logf("agents per NATS node: %v", p.spread(t, "stay", agents))
	var runs []runSummary
	for i := range 2 {
		code, sum, errs := p.run(t, "stay", append(base, "--run", fmt.Sprintf("stay%d", i), "--dump", filepath.Join(dir, fmt.Sprint("pool", i)))...)
		if code != 0 {
			t.Fatalf("pool run %d: exit %d: %s", i, code, errs)
		}
		p.clean(t, fmt.Sprintf("stay%d", i), "stay")
		sameParams(t, readParams(t, filepath.Join(dir, fmt.Sprint("pool", i), "final.safetensors")), want, 0)
		if len(pidsOf(sum)) != 3 {
			t.Fatalf("run %d: assignment %+v: want 3 agents", i, sum.Assignment)
		}
		runs = append(runs, sum)
	}
	for _, a := range agents {
		if !pidsOf(runs[0])[a.cmd.Process.Pid] || !pidsOf(runs[1])[a.cmd.Process.Pid] {
			t.Fatalf("agent %d did not serve both runs: %+v, %+v", a.cmd.Process.Pid, runs[0].Assignment, runs[1].Assignment)
		}
		if !strings.Contains(a.stderr(), "joined run stay1") || !strings.Contains(a.stderr(), "training mmt's stage") {
			t.Errorf("agent %d does not say whom it joined and what it runs:\n%s", a.cmd.Process.Pid, a.stderr())
		}
	}
	dead := agents[0].cmd.Process.Pid
	syscall.Kill(dead, syscall.SIGKILL)
	// the third agent starts once the run says it waits for one: started
	// after a fixed delay, it could be there before a run slowed by a
	// loaded machine looks, and the run would not wait
	c := p.startRun(t, "stay", append(base, "--run", "stay2", "--dump", filepath.Join(dir, "pool2"))...)
	waitFor(t, c.stderr, "waiting for 3 agents of pool stay (", 60*time.Second)
	p.agent(t, "stay", "")
	sum := c.wait(t, 120*time.Second)
	errs := c.stderr()
	if pidsOf(sum)[dead] || len(pidsOf(sum)) != 3 {
		t.Fatalf("the killed agent (pid %d) was counted: %+v", dead, sum.Assignment)
	}
	// how many of the two live ones it had heard when it said so depends
	// on the load (their adverts come every heartbeat); never the dead one
	if !regexp.MustCompile(`waiting for 3 agents of pool stay \([012] free now\)`).MatchString(errs) {
		t.Errorf("the run did not wait for a third live agent:\n%s", errs)
	}
	sameParams(t, readParams(t, filepath.Join(dir, "pool2", "final.safetensors")), want, 0)
	p.clean(t, "stay2", "stay")
}

// TestPoolPlacement: a plan for 2 nodes of 2 devices, run on 4 agents
// labelled with hosts a and b and started interleaved (a's on NATS nodes 1
// and 2, b's on 2 and 3: each host's agents on different NATS nodes), puts
// each plan node's workers on one host, whatever order they joined in; a
// pool whose 4 agents are on 4 hosts is refused, exit 2, in one line.
// No run leaves a process or subscription behind.
func TestPoolPlacement(t *testing.T) {
	model := smallModel(t, "mmt")
	plan := filepath.Join(t.TempDir(), "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "4", "--devices-per-node", "2", "--device", "cpu", "--micro-batch", "4", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	p := newTestPool(t)
	for i, order := range []string{"abab", "baab"} {
		pool := fmt.Sprint("place", i)
		var agents []*agentProc
		nodesOf := map[string][]int{} // per host, its agents' NATS nodes
		for _, h := range order {
			a := p.agentOn(t, pool, string(h), len(nodesOf[string(h)])+int(h-'a'))
			agents = append(agents, a)
			nodesOf[string(h)] = append(nodesOf[string(h)], a.node+1)
			time.Sleep(150 * time.Millisecond) // they join in this order
		}
		per := p.spread(t, pool, agents)
		if p.cluster != nil && (nodesOf["a"][0] == nodesOf["a"][1] || nodesOf["b"][0] == nodesOf["b"][1]) {
			t.Fatalf("a host's agents on one NATS node: %v", nodesOf)
		}
		code, sum, errs := p.run(t, pool, plan, "--model", model, "--steps", "2", "--run", pool)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", order, code, errs)
		}
		p.clean(t, pool, pool)
		hostOf := map[int]string{}
		nodes := map[int]int{}
		for _, a := range sum.Assignment {
			nodes[a.Node]++
			if h, ok := hostOf[a.Node]; ok && h != a.Host {
				t.Fatalf("%s: node %d runs on hosts %s and %s: %+v", order, a.Node, h, a.Host, sum.Assignment)
			}
			hostOf[a.Node] = a.Host
		}
		if len(nodes) != 2 || nodes[0] != 2 || nodes[1] != 2 || hostOf[0] == hostOf[1] {
			t.Fatalf("%s: want 2 nodes of 2 workers on hosts a and b: %+v", order, sum.Assignment)
		}
		t.Logf("%s: agents per NATS node %v, host a's on NATS nodes %v, b's on %v; plan node 0 on host %s, node 1 on host %s", order, per, nodesOf["a"], nodesOf["b"], hostOf[0], hostOf[1])
	}
	for _, h := range []string{"h1", "h2", "h3", "h4"} {
		p.agent(t, "spread", h)
	}
	// no restart is spent on it: the same agents would be refused again
	code, _, errs := p.run(t, "spread", plan, "--model", model, "--steps", "2", "--run", "spread", "--join-timeout", "1s", "--restarts", "2")
	p.clean(t, "spread", "spread")
	lines := strings.Split(strings.TrimSpace(errs), "\n")
	if last := lines[len(lines)-1]; code != 2 || !strings.HasPrefix(last, "--workers pool:spread: cannot honour the plan's nodes") || strings.Count(errs, "cannot honour") != 1 || strings.Contains(errs, "restarting") {
		t.Fatalf("exit %d: %s", code, errs)
	}
}

// TestPoolRunSurvivesANodeKill: a run on 3 agents spread over the 3 nodes
// of a NATS cluster; once it is past its third step, the node of the agent
// that trains stage 0 is killed (and the coordinator's too, when it is
// there). The agent reconnects to another node and the run ends, with no
// restart, bit-identical to an uninterrupted run. With the node back, the
// same agents serve a second run, to the same parameters: none was lost
// to the kill. Neither run leaves a process or subscription behind.
func TestPoolRunSurvivesANodeKill(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a pool over a nats-server cluster losing a node; make check runs it")
	}
	const steps = "60"
	dir, model, plan, want := elasticSetup(t, steps)
	p := newTestPool(t)
	if p.cluster == nil {
		t.Skip("no nats-server: no node to kill")
	}
	var agents []*agentProc
	for range 3 {
		agents = append(agents, p.agent(t, "nodekill", ""))
	}
	p.spread(t, "nodekill", agents)
	metrics := filepath.Join(dir, "metrics.jsonl")
	c := p.startRun(t, "nodekill", plan, "--model", model, "--steps", steps, "--optimizer", "adam", "--dump", filepath.Join(dir, "killed"),
		"--metrics", metrics, "--log-every", "1", "--run", "nodekill1")
	if at := waitStep(t, metrics, 3, nil); at >= 60 {
		t.Fatalf("the run ended before the kill:\n%s", c.stderr())
	}
	victim := p.agentOf(t, c.stderr(), "nodekill", 0)
	coord, _ := coordinatorNode(t, p.cluster, "nodekill1")
	p.cluster.Kill(victim.node)
	sum := c.wait(t, 60*time.Second)
	sameParams(t, readParams(t, filepath.Join(dir, "killed", "final.safetensors")), want, 0)
	if len(sum.Recoveries) != 0 {
		t.Fatalf("the node kill cost a restart: %+v", sum.Recoveries)
	}
	moved := lineWith(victim.stderr(), "graphpipe worker: reconnected to the NATS server at ")
	if moved == "" || strings.HasSuffix(moved, strings.TrimPrefix(p.cluster.URL(victim.node), "nats://")) {
		t.Fatalf("stage 0's agent did not move off node %d:\n%s", victim.node+1, victim.stderr())
	}
	p.clean(t, "nodekill1", "nodekill")
	p.cluster.Restart(victim.node)
	code, sum2, errs := p.run(t, "nodekill", plan, "--model", model, "--steps", steps, "--optimizer", "adam", "--dump", filepath.Join(dir, "after"), "--run", "nodekill2", "--join-timeout", "10s")
	if code != 0 {
		t.Fatalf("run after the node kill: exit %d: %s", code, errs)
	}
	sameParams(t, readParams(t, filepath.Join(dir, "after", "final.safetensors")), want, 0)
	for _, a := range agents {
		if !pidsOf(sum2)[a.cmd.Process.Pid] {
			t.Fatalf("agent pid %d (node %d) did not serve the run after the kill: %+v", a.cmd.Process.Pid, a.node+1, sum2.Assignment)
		}
	}
	p.clean(t, "nodekill2", "nodekill")
	t.Logf("node %d killed at step 3 or later (the coordinator's node: %d); stage 0's agent pid %d %s; final parameters bit-identical; the same 3 agents served the next run",
		victim.node+1, coord+1, victim.cmd.Process.Pid, strings.TrimPrefix(moved, "graphpipe worker: "))
}

// waitFor waits (up to limit) until text() holds want: a line a process
// prints after what the test can see of it (a connection, a run started).
func waitFor(t testing.TB, text func() string, want string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !strings.Contains(text(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%q not said within %v:\n%s", want, limit, text())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var placedRE = regexp.MustCompile(`worker (\d+) \(stage \d+\) on agent \S+ \(pid (\d+),`)

// agentOf is the agent that runs worker w in the latest placement the
// run's stderr names (its "worker W (stage S) on agent ID (pid P, ...)").
func (p *testPool) agentOf(t testing.TB, errs, pool string, w int) *agentProc {
	t.Helper()
	pid := 0
	for _, l := range strings.Split(errs, "\n") {
		if !strings.HasPrefix(l, "pool "+pool+": node ") {
			continue
		}
		for _, m := range placedRE.FindAllStringSubmatch(l, -1) {
			if m[1] == strconv.Itoa(w) {
				pid, _ = strconv.Atoi(m[2])
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range p.agents {
		if pid != 0 && a.cmd.Process.Pid == pid {
			return a
		}
	}
	t.Fatalf("worker %d's agent (pid %d) is none of the agents started:\n%s", w, pid, errs)
	return nil
}

// TestPoolRefusesAnotherDevice: a plan made for h100 devices, offered to a
// pool of CPU agents (as many as it has workers), is refused at once, in
// one line, exit 2, naming the plan's device and the agents'; no restart
// is spent on it. The same agents then train a plan made for the CPU.
func TestPoolRefusesAnotherDevice(t *testing.T) {
	model := smallModel(t, "mmt")
	dir := t.TempDir()
	gpu, cpu := filepath.Join(dir, "h100.json"), filepath.Join(dir, "cpu.json")
	for plan, device := range map[string]string{gpu: "h100", cpu: "cpu"} {
		if code, _, errs := gp(t, "", "search", model, "--devices", "2", "--device", device, "--micro-batch", "4", "-o", plan); code != 0 {
			t.Fatal(errs)
		}
	}
	p := newTestPool(t)
	p.agent(t, "kinds", "")
	p.agent(t, "kinds", "")
	code, _, errs := p.run(t, "kinds", gpu, "--model", model, "--steps", "2", "--run", "kinds-gpu", "--restarts", "2", "--join-timeout", "30s")
	lines := strings.Split(strings.TrimSpace(errs), "\n")
	last := lines[len(lines)-1]
	if code != 2 || !strings.HasPrefix(last, "--workers pool:kinds: the plan is for h100 devices") || !strings.Contains(last, "2 × cpu (") ||
		strings.Count(errs, "the plan is for") != 1 || strings.Contains(errs, "restarting") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if code, _, errs := p.run(t, "kinds", cpu, "--model", model, "--steps", "2", "--run", "kinds-cpu"); code != 0 {
		t.Fatalf("the CPU plan on the CPU agents: exit %d: %s", code, errs)
	}
	p.clean(t, "kinds-cpu", "kinds")
}
