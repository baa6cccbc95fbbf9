package runtime

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/internal/natscluster"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/runtime/wire/wiretest"
	"github.com/graphpipe/graphpipe/stage"
)

// TestRunSurvivesANodeKill: the coordinator and the workers of a run share
// one connection to the cluster; its node is killed at the run's 60th
// publish. The client moves to another node and the run ends with the
// parameters of the in-memory run, bit for bit.
func TestRunSurvivesANodeKill(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 3-node nats-server cluster losing a node; make check runs it")
	}
	c := natscluster.Start(t, natscluster.Options{})
	g, plan := smallPlan(t, "mmt", 3, 4)
	o := Options{Train: stage.TrainOptions{Optimizer: "adam", LR: 1e-3}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	want, err := RunLocal(ctx, &Job{Run: "mem", Graph: g, Plan: plan, Steps: 6, Options: o}, wire.NewMemory(1, wire.Faults{}, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	nt, moved := wiretest.DialCluster(t, c, "run")
	node := wiretest.NodeOf(t, c, nt)
	kt := &killAt{Transport: nt, at: 60, kill: func() { c.Kill(node) }}
	got, err := RunLocal(ctx, &Job{Run: "killnode", Graph: g, Plan: plan, Steps: 6, Options: o}, kt)
	if err != nil {
		t.Fatal(err)
	}
	if kt.published() < 60 {
		t.Fatalf("the run published %d messages: the node was never killed", kt.published())
	}
	if urls := moved.List(); len(urls) == 0 || strings.Contains(strings.Join(urls, ","), c.URL(node)) {
		t.Fatalf("reconnections %v; the killed node was %s", urls, c.URL(node))
	}
	equalParams(t, got.Params, want.Params, 0)
	t.Logf("killed %s at publish 60 of %d; the client moved to %v", c.URL(node), kt.published(), moved.List())
}

// killAt is a transport that calls kill at its at-th publish.
type killAt struct {
	wire.Transport
	mu   sync.Mutex // guards n
	n    int
	at   int
	kill func()
}

func (k *killAt) Publish(subject string, data []byte) error {
	k.mu.Lock()
	k.n++
	now := k.n == k.at
	k.mu.Unlock()
	if now {
		k.kill()
	}
	return k.Transport.Publish(subject, data)
}

func (k *killAt) published() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.n
}
