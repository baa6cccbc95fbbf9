package runtime

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
)

// TestOverEmbeddedNATS: a run over a real NATS server on a random loopback
// port, with a small payload limit to force chunking, gives the same
// parameters as the in-memory run, bit for bit; two runs on one server at
// once do not see each other's traffic.
func TestOverEmbeddedNATS(t *testing.T) {
	srv, err := wire.StartEmbedded(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	g, plan := smallPlan(t, "mmt", 4, 4)
	o := Options{Train: stage.TrainOptions{Optimizer: "adam", LR: 1e-3}}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	want, err := RunLocal(ctx, &Job{Run: "mem", Graph: g, Plan: plan, Steps: 3, Options: o}, wire.NewMemory(1, wire.Faults{}, 4096))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wire.DialNATS(wire.NATSOptions{URL: srv.URL()}); err == nil {
		t.Fatal("a client without the token connected")
	}
	var wg sync.WaitGroup
	results := make([]*Result, 2)
	errs := make([]error, 2)
	for i, run := range []string{"run-a", "run-b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nt, err := wire.DialNATS(wire.NATSOptions{URL: srv.URL(), Token: srv.Token, Name: run})
			if err != nil {
				errs[i] = err
				return
			}
			defer nt.Close()
			if nt.MaxPayload() != 4096 {
				t.Errorf("max payload %d", nt.MaxPayload())
			}
			results[i], errs[i] = RunLocal(ctx, &Job{Run: run, Graph: g, Plan: plan, Steps: 3, Options: o}, nt)
		}()
	}
	wg.Wait()
	for i := range results {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		equalParams(t, results[i].Params, want.Params, 0)
	}
}
