package runtime

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/stage"
)

// TestOverEmbeddedNATS: a run over a real NATS server on a random loopback
// port, with a small payload limit to force chunking, gives the same
// parameters as the in-memory run, bit for bit; two runs on one server at
// once do not see each other's traffic.
func TestOverEmbeddedNATS(t *testing.T) {
	srv, err := StartEmbedded(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	g, plan := smallPlan(t, "mmt", 4, 4)
	o := Options{Train: stage.TrainOptions{Optimizer: "adam", LR: 1e-3}}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	want, err := RunLocal(ctx, g, plan, NewMemory(1, Faults{}, 4096), "mem", 3, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DialNATS(NATSOptions{URL: srv.URL()}); err == nil {
		t.Fatal("a client without the token connected")
	}
	var wg sync.WaitGroup
	results := make([]*Result, 2)
	errs := make([]error, 2)
	for i, run := range []string{"run-a", "run-b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nt, err := DialNATS(NATSOptions{URL: srv.URL(), Token: srv.Token, Name: run})
			if err != nil {
				errs[i] = err
				return
			}
			defer nt.Close()
			if nt.MaxPayload() != 4096 {
				t.Errorf("max payload %d", nt.MaxPayload())
			}
			results[i], errs[i] = RunLocal(ctx, g, plan, nt, run, 3, o)
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

// TestLastMessageIsAcknowledged: a receiver that closes its endpoint and its
// connection right after the last message it needs (as the coordinator does
// with the workers' parameters) has acknowledged it: the sender's drain
// ends. The acknowledgement is published from a goroutine; before Close
// waited for it, it could come after the connection closed, and the sender
// waited on it until the coordinator's silence failed the worker.
func TestLastMessageIsAcknowledged(t *testing.T) {
	srv, err := StartEmbedded(0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	dial := func(name string) *NATS {
		nt, err := DialNATS(NATSOptions{URL: srv.URL(), Token: srv.Token, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return nt
	}
	for i := 0; i < 30; i++ {
		run := fmt.Sprintf("last%d", i)
		na, nb := dial("a"), dial("b")
		a, err := NewEndpoint(na, run, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		b, err := NewEndpoint(nb, run, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		k := msgKey{iter: 1, edge: ctlEdge, dir: 'g'}
		if err := a.Send(ctx, 1, k, []byte("params")); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Receive(ctx, k); err != nil {
			t.Fatal(err)
		}
		b.Close()
		nb.Close()
		if err := a.Drain(ctx); err != nil {
			t.Fatalf("run %d: the sender's drain: %v", i, err)
		}
		cancel()
		a.Close()
		na.Close()
	}
}
