package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/internal/natscluster"
	"github.com/graphpipe/graphpipe/runtime/wire"
)

// accountsCluster starts a 3-node nats-server cluster whose nodes all carry
// testdata/nats-accounts.conf, the configuration the README shows.
func accountsCluster(t *testing.T) *natscluster.Cluster {
	conf, err := os.ReadFile(filepath.Join("testdata", "nats-accounts.conf"))
	if err != nil {
		t.Fatal(err)
	}
	return natscluster.Start(t, natscluster.Options{Auth: string(conf)})
}

// as is the cluster's URL list with a user's credentials in every URL.
func as(c *natscluster.Cluster, user, password string) string {
	return strings.ReplaceAll(c.URLs(), "nats://", "nats://"+user+":"+password+"@")
}

// TestRunSurvivesANodeKill: a run over a real 3-node nats-server cluster as
// user alice (testdata/nats-accounts.conf), the coordinator and three
// worker processes each given every node's URL; once the run is past its
// third step, the node the coordinator is on is killed. The clients there
// move to another node and the run ends with the parameters of an
// uninterrupted run of the same plan, bit for bit.
func TestRunSurvivesANodeKill(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 3-node nats-server cluster losing a node; make check runs it")
	}
	c := accountsCluster(t)
	model := smallModel(t, "mmt")
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "3", "--device", "cpu", "--micro-batch", "4", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	const steps = 60
	base := []string{"run", plan, "--model", model, "--steps", fmt.Sprint(steps), "--optimizer", "adam"}
	if code, _, errs := gp(t, "", append(base, "--dump", filepath.Join(dir, "straight"))...); code != 0 {
		t.Fatal(errs)
	}
	run, urls := "alice.nodekill", as(c, "alice", "alice-secret")
	metrics := filepath.Join(dir, "metrics.jsonl")
	var code int
	var errs string
	done := make(chan struct{})
	go func() {
		defer close(done)
		code, _, errs = gp(t, "", append(base, "--nats", urls, "--workers", "external", "--run", run, "--dump", filepath.Join(dir, "killed"),
			"--metrics", metrics, "--log-every", "1")...)
	}()
	workers := startClusterWorkers(t, urls, run, 3)
	if at := waitStep(t, metrics, 3, done); at < 0 || at >= steps {
		t.Fatalf("the run ended before the kill: exit %d: %s", code, errs)
	}
	node, spread := coordinatorNode(t, c, run)
	c.Kill(node)
	t.Logf("killed node %d, the coordinator's; clients per node before: %v", node+1, spread)
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the run did not finish")
	}
	logs := workers.wait(t)
	if code != 0 {
		t.Fatalf("run: exit %d: %s\nworkers:\n%s", code, errs, strings.Join(logs, "\n"))
	}
	killed := strings.TrimPrefix(c.URL(node), "nats://")
	if at := lineWith(errs, "graphpipe: reconnected to the NATS server at "); at == "" || strings.HasSuffix(at, killed) {
		t.Fatalf("the coordinator did not move off node %d (%s):\n%s", node+1, killed, errs)
	}
	moved := 0
	for _, l := range logs {
		if strings.Contains(l, "graphpipe worker: reconnected to the NATS server") {
			moved++
		}
	}
	sameParams(t, readParams(t, filepath.Join(dir, "killed", "final.safetensors")), readParams(t, filepath.Join(dir, "straight", "final.safetensors")), 0)
	t.Logf("%d steps, node %d killed mid-run, the coordinator and %d of 3 workers reconnected elsewhere; final parameters bit-identical to the uninterrupted run", steps, node+1, moved)
}

// clusterWorkers are worker processes of one run.
type clusterWorkers struct {
	procs []*exec.Cmd
	logs  []*bytes.Buffer
}

func startClusterWorkers(t *testing.T, urls, run string, n int) *clusterWorkers {
	t.Helper()
	self, _ := os.Executable()
	w := &clusterWorkers{}
	for i := 0; i < n; i++ {
		p := exec.Command(self, "worker", "--nats", urls, "--run", run)
		w.logs = append(w.logs, &bytes.Buffer{})
		p.Stderr = w.logs[i]
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		w.procs = append(w.procs, p)
	}
	t.Cleanup(func() {
		for _, p := range w.procs {
			p.Process.Kill()
		}
	})
	return w
}

// wait waits for the workers and returns their stderr, failing the test for
// one that did not succeed.
func (w *clusterWorkers) wait(t *testing.T) []string {
	t.Helper()
	var out []string
	for i, p := range w.procs {
		if err := p.Wait(); err != nil {
			t.Errorf("worker %d: %v: %s", i, err, w.logs[i])
		}
		out = append(out, w.logs[i].String())
	}
	return out
}

// waitStep waits until the run's metrics file has reached step; it returns
// the step it saw.
func waitStep(t *testing.T, metrics string, step int, done <-chan struct{}) int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(metrics)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		var last struct {
			Step int `json:"step"`
		}
		if json.Unmarshal([]byte(lines[len(lines)-1]), &last) == nil && last.Step >= step {
			return last.Step
		}
		select {
		case <-done:
			return -1 // the run ended before step
		case <-time.After(2 * time.Millisecond):
		}
	}
	t.Fatalf("step %d not reached in 60 s", step)
	return 0
}

// coordinatorNode is the node the run's coordinator is connected to, and
// how many of the run's clients each node has.
func coordinatorNode(t *testing.T, c *natscluster.Cluster, run string) (int, []int) {
	t.Helper()
	node, spread := -1, make([]int, 3)
	for i := 0; i < 3; i++ {
		names, err := c.Clients(i)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if strings.HasSuffix(n, " "+run) {
				spread[i]++
			}
		}
		if slices.Contains(names, "graphpipe coordinator "+run) {
			node = i
		}
	}
	if node < 0 {
		t.Fatal("the coordinator is on no node")
	}
	return node, spread
}

// TestAccountsFenceRuns: with testdata/nats-accounts.conf (the README's),
// a client of another account, and a user of the same account, cannot
// publish into alice's run's subjects: the server refuses with a
// permissions violation, and alice's stage never hears the message; alice
// herself reaches her own stage.
func TestAccountsFenceRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a nats-server cluster with accounts; make check runs it")
	}
	c := accountsCluster(t)
	inbox := wire.Inbox("alice.exp1", 1, 0)
	dial := func(user, password string, node int) (*wire.NATS, chan error) {
		refused := make(chan error, 4)
		u := strings.Replace(c.URL(node), "nats://", "nats://"+user+":"+password+"@", 1)
		n, err := wire.DialNATS(wire.NATSOptions{URL: u, Name: user, OnError: func(err error) { refused <- err }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n, refused
	}
	alice, _ := dial("alice", "alice-secret", 0)
	var mu sync.Mutex // guards heard
	var heard []string
	if _, err := alice.Subscribe(inbox, func(b []byte) { mu.Lock(); heard = append(heard, string(b)); mu.Unlock() }); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ user, password string }{{"mallory", "mallory-secret"}, {"bob", "bob-secret"}} {
		t.Run(tc.user, func(t *testing.T) {
			n, refused := dial(tc.user, tc.password, 2)
			if err := n.Publish(inbox, []byte("from "+tc.user)); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-refused:
				want := fmt.Sprintf("permissions violation for publish to %q", inbox)
				if !strings.Contains(strings.ToLower(err.Error()), want) {
					t.Fatalf("refused with %v, want %s", err, want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the server did not refuse the publish")
			}
		})
	}
	// alice's own message, from another node, does arrive: the fence is
	// the permissions, not a broken route
	other, _ := dial("alice", "alice-secret", 2)
	deadline := time.Now().Add(5 * time.Second)
	for {
		other.Publish(inbox, []byte("from alice"))
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		got := slices.Clone(heard)
		mu.Unlock()
		if len(got) > 0 {
			for _, m := range got {
				if m != "from alice" {
					t.Fatalf("alice's stage heard %q", m)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("alice's own message never arrived")
		}
	}
}

// lineWith is the first line of text that holds s, or "".
func lineWith(text, s string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// TestREADMEShowsTheTestedAccounts: the account configuration the README
// shows is testdata/nats-accounts.conf, the one the tests run with.
func TestREADMEShowsTheTestedAccounts(t *testing.T) {
	conf, err := os.ReadFile(filepath.Join("testdata", "nats-accounts.conf"))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```conf\n"+string(conf)+"```\n") {
		t.Fatal("README.md does not show testdata/nats-accounts.conf as it is")
	}
}
