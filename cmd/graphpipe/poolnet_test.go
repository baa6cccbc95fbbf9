package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/internal/natscluster"
	"github.com/graphpipe/graphpipe/runtime/wire"
)

// testPool is the NATS network the pool tests run on, and the agents
// started on it: a real 3-node nats-server cluster (internal/natscluster),
// each agent dialling the nodes in order from a node of its own
// (--nats-in-order), the next agent from the next node, so that a pool's
// agents are spread over the nodes and the coordinator, dialling the list
// as users do, lands on a random one. Where no nats-server is installed
// (and $GRAPHPIPE_REQUIRE_NATS_SERVER, which .ci/run sets, is unset), one
// embedded server instead, and what needs a cluster's monitoring (spread,
// subscriptions) is not checked.
type testPool struct {
	cluster    *natscluster.Cluster // nil: the embedded server
	url, token string               // the embedded server's
	mu         sync.Mutex           // guards agents and next
	agents     []*agentProc
	next       int // the node the next agent dials first
}

func newTestPool(t testing.TB) *testPool {
	t.Helper()
	if natscluster.Binary() != "" || os.Getenv(natscluster.RequireEnv) != "" {
		return &testPool{cluster: natscluster.Start(t, natscluster.Options{})}
	}
	t.Log("no nats-server installed: the pool runs on one embedded NATS server")
	srv, err := wire.StartEmbedded(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return &testPool{url: srv.URL(), token: srv.Token}
}

// urlsFrom is the cluster's URL list starting at node first.
func (p *testPool) urlsFrom(first int) string {
	var us []string
	for i := range p.cluster.Nodes() {
		us = append(us, p.cluster.URL((first+i)%p.cluster.Nodes()))
	}
	return strings.Join(us, ",")
}

// coordArgs are the NATS flags of a coordinator: the whole list, in the
// order users give it (the client picks a node at random).
func (p *testPool) coordArgs() []string {
	if p.cluster == nil {
		return []string{"--nats", p.url, "--nats-token", p.token}
	}
	return []string{"--nats", p.cluster.URLs()}
}

// agentProc is an agent process (this test binary as graphpipe worker
// --pool) and its stderr.
type agentProc struct {
	cmd  *exec.Cmd
	node int // the NATS node it dials first; -1 on the embedded server
	log  logBuffer
}

func (a *agentProc) Write(b []byte) (int, error) { return a.log.Write(b) }

func (a *agentProc) stderr() string { return a.log.String() }

// agent starts an agent of pool on host (none: the default label), on
// the next node of the cluster.
func (p *testPool) agent(t testing.TB, pool, host string) *agentProc {
	t.Helper()
	return p.agentOn(t, pool, host, -1)
}

// agentOn starts an agent of pool on host that dials the cluster's node
// first (-1: the next node).
func (p *testPool) agentOn(t testing.TB, pool, host string, node int) *agentProc {
	t.Helper()
	self, _ := os.Executable()
	p.mu.Lock()
	defer p.mu.Unlock()
	a := &agentProc{node: -1}
	args := []string{"worker", "--pool", pool}
	if p.cluster != nil {
		if node < 0 {
			node = p.next
			p.next++
		}
		a.node = node % p.cluster.Nodes()
		args = append(args, "--nats", p.urlsFrom(a.node), "--nats-in-order")
	} else {
		args = append(args, "--nats", p.url)
	}
	if host != "" {
		args = append(args, "--host", host)
	}
	a.cmd = exec.Command(self, args...)
	a.cmd.Env = append(os.Environ(), tokenEnv+"="+p.token)
	a.cmd.Stderr = a
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.agents = append(p.agents, a)
	t.Cleanup(func() {
		a.cmd.Process.Kill()
		a.cmd.Wait()
	})
	return a
}

// spread waits until pool's agents are connected, each to the node it
// dials first, and fails the test unless they are on 2 nodes or more, as
// the nodes' monitoring sees them; it returns the agents per node (nil on
// the embedded server).
func (p *testPool) spread(t testing.TB, pool string, agents []*agentProc) []int {
	t.Helper()
	if p.cluster == nil {
		return nil
	}
	var per []int
	deadline := time.Now().Add(10 * time.Second)
	for {
		per = p.agentsPerNode(t, pool)
		total := 0
		for _, n := range per {
			total += n
		}
		if total == len(agents) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool %s: %d of %d agents connected after 10 s (per node %v)", pool, total, len(agents), per)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// the server sees an agent's connection before the agent prints that
	// it connected: wait for the line, do not expect it at once
	for _, a := range agents {
		waitFor(t, a.stderr, "connected to "+p.cluster.URL(a.node), 10*time.Second)
	}
	used := 0
	for _, n := range per {
		if n > 0 {
			used++
		}
	}
	if used < 2 {
		t.Fatalf("pool %s: agents per node %v, want 2 nodes or more", pool, per)
	}
	return per
}

// clean fails the test when run (on pool) left something behind: a live
// process of this binary that is not one of the agents started (a worker
// or coordinator the run started, or one that lost its way), or, within
// 10 s (an agent that missed its release leaves after its heartbeat
// timeout), a subscription under the run's subjects (graphpipe.RUN.) or
// the coordinator's claim on the pool (graphpipe.pool.POOL.claims.) on any
// node of the cluster.
func (p *testPool) clean(t testing.TB, run, pool string) {
	t.Helper()
	if strays := p.strays(); len(strays) > 0 {
		t.Fatalf("run %s left processes behind: %s", run, strings.Join(strays, "; "))
	}
	if p.cluster == nil {
		return
	}
	prefixes := []string{"graphpipe." + run + ".", "graphpipe.pool." + pool + ".claims."}
	var left []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if left = p.subsUnder(t, prefixes); len(left) == 0 {
			return
		}
	}
	t.Fatalf("run %s left subscriptions behind 10 s after its end: %s", run, strings.Join(left, "; "))
}

// subsUnder is the live nodes' subscriptions under prefixes, each as
// "node N: client NAME: SUBJECT".
func (p *testPool) subsUnder(t testing.TB, prefixes []string) []string {
	t.Helper()
	var out []string
	for i := range p.cluster.Nodes() {
		if !p.cluster.Alive(i) {
			continue
		}
		clients, err := p.cluster.ClientSubs(i)
		if err != nil {
			t.Fatal(err)
		}
		held := 0
		for _, c := range clients {
			for _, s := range c.Subs {
				for _, pre := range prefixes {
					if strings.HasPrefix(s, pre) {
						out = append(out, fmt.Sprintf("node %d: client %q: %s", i+1, c.Name, s))
					}
				}
			}
		}
		// the node's own count, from /subsz, must agree
		for _, pre := range prefixes {
			subs, err := p.cluster.Subs(i, pre)
			if err != nil {
				t.Fatal(err)
			}
			held += len(subs)
		}
		if held > 0 && len(out) == 0 {
			out = append(out, fmt.Sprintf("node %d: %d subscriptions in /subsz", i+1, held))
		}
	}
	return out
}

// strays are the live processes of this test binary other than itself and
// the agents started (killed ones that were not yet reaped are zombies,
// which have no executable and do not count), each as "pid P: ARGS".
func (p *testPool) strays() []string {
	self, _ := os.Executable()
	p.mu.Lock() // no agent starts meanwhile
	defer p.mu.Unlock()
	known := map[int]bool{os.Getpid(): true}
	for _, a := range p.agents {
		known[a.cmd.Process.Pid] = true
	}
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || known[pid] {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || exe != self {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		out = append(out, fmt.Sprintf("pid %d: %s", pid, strings.Join(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), " ")))
	}
	slices.Sort(out)
	return out
}

// agentsPerNode is how many agents of pool each live node of the cluster
// has connected, as its monitoring sees them.
func (p *testPool) agentsPerNode(t testing.TB, pool string) []int {
	t.Helper()
	per := make([]int, p.cluster.Nodes())
	for i := range per {
		if !p.cluster.Alive(i) {
			continue
		}
		names, err := p.cluster.Clients(i)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if n == "graphpipe agent of pool "+pool {
				per[i]++
			}
		}
	}
	return per
}
