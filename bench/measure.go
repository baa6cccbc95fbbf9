package bench

import (
	"context"
	"sort"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/profile"
	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
)

// Emulated runs plan with emulated devices (in-process workers over an
// embedded NATS server) and returns the median measured iteration, the first
// iteration left out.
func Emulated(g *dag.Graph, plan *plan.Plan, steps int) (float64, error) {
	iter, _, err := EmulatedTimeline(g, plan, steps)
	return iter, err
}

// EmulatedTimeline is Emulated, and the measured timeline of the last
// iteration.
func EmulatedTimeline(g *dag.Graph, plan *plan.Plan, steps int) (float64, *microbatch.Result, error) {
	srv, err := wire.StartEmbedded(0)
	if err != nil {
		return 0, nil, err
	}
	defer srv.Shutdown()
	t, err := wire.DialNATS(wire.NATSOptions{URL: srv.URL(), Token: srv.Token})
	if err != nil {
		return 0, nil, err
	}
	defer t.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := runtime.RunLocal(ctx, &runtime.Job{Run: "emu", Graph: g, Plan: plan, Steps: steps, Options: runtime.Options{Emulate: true}}, t)
	if err != nil {
		return 0, nil, err
	}
	it := append([]float64(nil), res.Iters[1:]...)
	sort.Float64s(it)
	return it[len(it)/2], res.Timeline(plan), nil
}

// CPURun trains g for real on this machine under plan (workers in this
// process over an embedded server) and single-process, and returns both
// throughputs in samples per second (start-up included) and the pipeline's
// median iteration in seconds (the first left out).
func CPURun(g *dag.Graph, plan *plan.Plan, steps int, o stage.TrainOptions) (pipe, single, iter float64, err error) {
	srv, err := wire.StartEmbedded(0)
	if err != nil {
		return 0, 0, 0, err
	}
	defer srv.Shutdown()
	t, err := wire.DialNATS(wire.NATSOptions{URL: srv.URL(), Token: srv.Token})
	if err != nil {
		return 0, 0, 0, err
	}
	defer t.Close()
	o.MicroBatch = int(plan.MicroBatch)
	start := time.Now()
	res, err := runtime.RunLocal(context.Background(), &runtime.Job{Run: "cpu", Graph: g, Plan: plan, Steps: steps, Options: runtime.Options{Train: o}}, t)
	if err != nil {
		return 0, 0, 0, err
	}
	pipe = float64(steps) * float64(g.BatchSize()) / time.Since(start).Seconds()
	it := append([]float64(nil), res.Iters[1:]...)
	sort.Float64s(it)
	iter = it[len(it)/2]
	tr, err := stage.NewTrainer(g, o)
	if err != nil {
		return 0, 0, 0, err
	}
	start = time.Now()
	for s := 0; s < steps; s++ {
		if _, _, err := tr.Step(s); err != nil {
			return 0, 0, 0, err
		}
	}
	return pipe, float64(steps) * float64(g.BatchSize()) / time.Since(start).Seconds(), iter, nil
}

// OpTimesOf times every op of g on this machine's CPU backend at every
// power-of-two micro-batch up to its batch, as graphpipe profile --model does.
func OpTimesOf(g *dag.Graph) (*plan.OpTimes, error) {
	var sizes []int
	for m := 1; int64(m) <= g.BatchSize(); m *= 2 {
		sizes = append(sizes, m)
	}
	return profile.MeasureOpTimes(g, sizes, 200*time.Millisecond, nil, "cpu (this run)", nil)
}

// ProbedCPU is the built-in cpu profile with its links measured on this
// host (profile.ProbeLinks, fitted by profile.FitLink), as graphpipe profile
// --device cpu measures them.
func ProbedCPU() (plan.Device, error) {
	d := plan.Profiles["cpu"]
	sizes, reps := profile.HostLinkSizes(false)
	t, err := profile.ProbeLinks(sizes, reps)
	if err != nil {
		return d, err
	}
	return profile.WithLinks(d, sizes, t)
}

// SingleIteration trains g in one process at micro-batch micro for steps
// iterations and returns the median iteration in seconds (the first left out).
func SingleIteration(g *dag.Graph, micro, steps int, o stage.TrainOptions) (float64, error) {
	o.MicroBatch = micro
	tr, err := stage.NewTrainer(g, o)
	if err != nil {
		return 0, err
	}
	var it []float64
	for s := 0; s < steps; s++ {
		start := time.Now()
		if _, _, err := tr.Step(s); err != nil {
			return 0, err
		}
		if s > 0 {
			it = append(it, time.Since(start).Seconds())
		}
	}
	sort.Float64s(it)
	return it[len(it)/2], nil
}

// TwoBranch is the model of the real CPU comparison.
func TwoBranch() (*dag.Graph, error) { return models.Branchy(2, 4, 512) }
