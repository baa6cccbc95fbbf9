package runtime

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
)

// TestCoordinatorWithJoiningWorkers: workers that know only the server and
// the run ID join, are given stages, train, and hand back the parameters of
// the in-process run.
func TestCoordinatorWithJoiningWorkers(t *testing.T) {
	srv, err := wire.StartEmbedded(0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	g, plan := smallPlan(t, "case-study", 3, 4)
	o := Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.05}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	want, err := RunLocal(ctx, g, plan, wire.NewMemory(1, wire.Faults{}, 1<<20), "ref", 4, o)
	if err != nil {
		t.Fatal(err)
	}
	dial := func() wire.Transport {
		nt, err := wire.DialNATS(wire.NATSOptions{URL: srv.URL(), Token: srv.Token})
		if err != nil {
			t.Fatal(err)
		}
		return nt
	}
	errs := make(chan error, len(plan.Stages))
	for range plan.Stages {
		go func() { errs <- Serve(ctx, dial(), "joined") }()
	}
	var iters []int64
	res, err := Coordinate(ctx, g, plan, dial(), "joined", 4, o, func(n int64, _ float64) { iters = append(iters, n) })
	if err != nil {
		t.Fatal(err)
	}
	for range plan.Stages {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	equalParams(t, res.Params, want.Params, 0)
	if len(iters) != 4 || len(res.Losses) != 4 || res.Losses[0] != want.Losses[0] {
		t.Errorf("progress %v, losses %v vs %v", iters, res.Losses, want.Losses)
	}
}

// TestCoordinatorStopsWhenAsked: Options.Stop closed during iteration 2
// ends the run after it: every worker leaves cleanly, the coordinator
// returns a StoppedError at step 3 and the checkpoint it wrote there
// resumes to the parameters of an uninterrupted run, bit for bit.
func TestCoordinatorStopsWhenAsked(t *testing.T) {
	srv, err := wire.StartEmbedded(0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	g, plan := smallPlan(t, "case-study", 3, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	o := Options{Train: stage.TrainOptions{Optimizer: "adam", LR: 1e-3}}
	want, err := RunLocal(ctx, g, plan, wire.NewMemory(1, wire.Faults{}, 1<<20), "ref", 5, o)
	if err != nil {
		t.Fatal(err)
	}
	dial := func() wire.Transport {
		nt, err := wire.DialNATS(wire.NATSOptions{URL: srv.URL(), Token: srv.Token})
		if err != nil {
			t.Fatal(err)
		}
		return nt
	}
	serve := func(run string) chan error {
		errs := make(chan error, len(plan.Stages))
		for range plan.Stages {
			go func() { errs <- Serve(ctx, dial(), run) }()
		}
		return errs
	}
	join := func(errs chan error) {
		for range plan.Stages {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	stop := make(chan struct{})
	o.CheckpointDir, o.Stop = t.TempDir(), stop
	errs := serve("stopped")
	_, err = Coordinate(ctx, g, plan, dial(), "stopped", 5, o, func(n int64, _ float64) {
		if n == 2 {
			close(stop)
		}
	})
	var se *StoppedError
	if !errors.As(err, &se) || se.Step != 3 || !se.Saved || se.Dir != o.CheckpointDir {
		t.Fatalf("got %v (%+v), want a stop at step 3 with a checkpoint", err, se)
	}
	join(errs)
	c, err := LoadCheckpoint(o.CheckpointDir, nil)
	if err != nil || c.Manifest.Step != 3 || c.Manifest.Run != "stopped" {
		t.Fatalf("checkpoint: %v %+v", err, c)
	}
	o.Stop, o.CheckpointDir, o.Resume = nil, "", c
	errs = serve("resumed")
	res, err := Coordinate(ctx, g, plan, dial(), "resumed", 5, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	join(errs)
	equalParams(t, res.Params, want.Params, 0)
}
