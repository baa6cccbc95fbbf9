package main

import (
	"bytes"
	"encoding/json"
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

// testPool is an embedded NATS server and the agent processes started on it.
type testPool struct {
	url, token string
}

func newTestPool(t testing.TB) *testPool {
	t.Helper()
	srv, err := runtime.StartEmbedded(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return &testPool{url: srv.URL(), token: srv.Token}
}

// agentProc is an agent process (this test binary as graphpipe worker
// --pool) and its stderr.
type agentProc struct {
	cmd *exec.Cmd
	mu  sync.Mutex // guards log
	log bytes.Buffer
}

func (a *agentProc) Write(b []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.log.Write(b)
}

func (a *agentProc) stderr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.log.String()
}

// agent starts an agent of pool on host (none: the default label).
func (p *testPool) agent(t testing.TB, pool, host string) *agentProc {
	t.Helper()
	self, _ := os.Executable()
	args := []string{"worker", "--nats", p.url, "--pool", pool}
	if host != "" {
		args = append(args, "--host", host)
	}
	a := &agentProc{cmd: exec.Command(self, args...)}
	a.cmd.Env = append(os.Environ(), tokenEnv+"="+p.token)
	a.cmd.Stderr = a
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.cmd.Process.Kill()
		a.cmd.Wait()
	})
	return a
}

// run runs graphpipe run with args on pool's agents, --json.
func (p *testPool) run(t *testing.T, pool string, args ...string) (int, runSummary, string) {
	t.Helper()
	args = append(append([]string{"run"}, args...), "--nats", p.url, "--nats-token", p.token, "--workers", "pool:"+pool, "--json")
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

// TestPoolRunsStayAndSkipTheDead: a run on a pool of 3 agents ends with
// the parameters of a local run of the same plan, bit for bit; the agents
// stay and serve a second run; after one is SIGKILLed, a third run counts
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
	var runs []runSummary
	for i := range 2 {
		code, sum, errs := p.run(t, "stay", append(base, "--run", fmt.Sprintf("stay%d", i), "--dump", filepath.Join(dir, fmt.Sprint("pool", i)))...)
		if code != 0 {
			t.Fatalf("pool run %d: exit %d: %s", i, code, errs)
		}
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
	go func() {
		time.Sleep(time.Second)
		p.agent(t, "stay", "")
	}()
	code, sum, errs := p.run(t, "stay", append(base, "--run", "stay2", "--dump", filepath.Join(dir, "pool2"))...)
	if code != 0 {
		t.Fatalf("run after a kill: exit %d: %s", code, errs)
	}
	if pidsOf(sum)[dead] || len(pidsOf(sum)) != 3 {
		t.Fatalf("the killed agent (pid %d) was counted: %+v", dead, sum.Assignment)
	}
	if !strings.Contains(errs, "waiting for 3 agents of pool stay (2 free now)") {
		t.Errorf("the run did not wait for a third live agent:\n%s", errs)
	}
	sameParams(t, readParams(t, filepath.Join(dir, "pool2", "final.safetensors")), want, 0)
}

// TestPoolPlacement: a plan for 2 nodes of 2 devices, run on 4 agents
// labelled with hosts a and b and started interleaved, puts each node's
// workers on one host, whatever order they joined in; a pool whose 4 agents
// are on 4 hosts is refused, exit 2, in one line.
func TestPoolPlacement(t *testing.T) {
	model := smallModel(t, "mmt")
	plan := filepath.Join(t.TempDir(), "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "4", "--devices-per-node", "2", "--device", "cpu", "--micro-batch", "4", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	p := newTestPool(t)
	for i, order := range []string{"abab", "baab"} {
		pool := fmt.Sprint("place", i)
		for _, h := range order {
			p.agent(t, pool, string(h))
			time.Sleep(150 * time.Millisecond) // they join in this order
		}
		code, sum, errs := p.run(t, pool, plan, "--model", model, "--steps", "2", "--run", pool)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", order, code, errs)
		}
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
	}
	for _, h := range []string{"h1", "h2", "h3", "h4"} {
		p.agent(t, "spread", h)
	}
	// no restart is spent on it: the same agents would be refused again
	code, _, errs := p.run(t, "spread", plan, "--model", model, "--steps", "2", "--run", "spread", "--join-timeout", "1s", "--restarts", "2")
	lines := strings.Split(strings.TrimSpace(errs), "\n")
	if last := lines[len(lines)-1]; code != 2 || !strings.HasPrefix(last, "--workers pool:spread: cannot honour the plan's nodes") || strings.Count(errs, "cannot honour") != 1 || strings.Contains(errs, "restarting") {
		t.Fatalf("exit %d: %s", code, errs)
	}
}
