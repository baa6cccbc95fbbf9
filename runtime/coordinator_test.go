package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/stage"
)

// TestCoordinatorWithJoiningWorkers: workers that know only the server and
// the run ID join, are given stages, train, and hand back the parameters of
// the in-process run.
func TestCoordinatorWithJoiningWorkers(t *testing.T) {
	srv, err := StartEmbedded(0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	g, plan := smallPlan(t, "case-study", 3, 4)
	o := Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.05}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	want, err := RunLocal(ctx, g, plan, NewMemory(1, Faults{}, 1<<20), "ref", 4, o)
	if err != nil {
		t.Fatal(err)
	}
	dial := func() Transport {
		nt, err := DialNATS(NATSOptions{URL: srv.URL(), Token: srv.Token})
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
