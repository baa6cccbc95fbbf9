package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/search"
	"github.com/graphpipe/graphpipe/stage"
)

// scheduleHelp is the planning commands' --schedule.
const scheduleHelp = "schedule: 1f1b (warmed up to hide transfers where memory allows), zb (1f1b with weight gradients deferred into idle time), " +
	"1f1b-depth (each stage holds its depth: 1 + its longest path to a sink), gpipe; synchronous all four. " +
	"2bw (PipeDream-2BW: 1f1b with no flush between iterations, each stage keeping two versions of its weights, gradients one update stale: " +
	"W(t+1) = W(t) - lr·grad f(W(t-1))), or " + search.AutoAsync + " (stale weights allowed: the faster of 1f1b and 2bw)"

// trainScheduleHelp is train's --schedule.
const trainScheduleHelp = "2bw: train as PipeDream-2BW's pipeline without a flush does, each step's gradient taken at the weights before the last update " +
	"(W(t+1) = W(t) - lr·grad f(W(t-1)), the first step's at the initial weights): the reference 'run --schedule 2bw' equals; " +
	"any synchronous schedule (1f1b, the default, zb, 1f1b-depth, gpipe) trains the same: every step at the newest weights"

// trainTwoBW reads train's --schedule: whether the trainer keeps two
// versions of its weights (2bw), refusing what two versions do not run
// with.
func trainTwoBW(cmd *cobra.Command, schedule, backend string, sb bool) (bool, error) {
	if schedule == search.AutoAsync {
		return false, usagef("--schedule %s: the planner's choice between 1f1b and 2bw; train takes 2bw, or a synchronous schedule", schedule)
	}
	k, err := microbatch.KindOf(schedule)
	switch {
	case err != nil:
		return false, usagef("--schedule: %v", err)
	case !k.NoFlush:
		return false, nil
	case backend != "" && backend != "cpu":
		return false, usagef("--schedule %s: two versions of the weights are kept on the cpu backend only, not --backend %s", schedule, backend)
	case sb:
		return false, usagef("--schedule %s: not with --selective-backprop (a batch's kept samples would depend on losses of a batch not yet accounted)", schedule)
	}
	return true, nil
}

// keepTwoVersions makes t keep two versions of its weights; a model it
// cannot (buffers) is bad input.
func keepTwoVersions(t *stage.Trainer, schedule string) error {
	if err := t.Ex.SetTwoVersions(); err != nil {
		return inputf("--schedule %s: %v", schedule, err)
	}
	return nil
}

// twoVersionsWhy is why workers on backend cannot train without a flush
// (they keep one version of the weights: every backend but cpu), ""
// where they can (an emulated run computes nothing): what a search for
// the run is told (search.Options.FlushOnly), so that auto-async does not
// choose 2bw for workers that would refuse it.
func twoVersionsWhy(backend string, emulate bool) string {
	if emulate || backend == "" || backend == "cpu" {
		return ""
	}
	return fmt.Sprintf("--backend %s keeps one version of every stage's weights (two on the cpu backend only)", backend)
}

// checkTwoBWRun refuses a run of a plan without a flush on a backend that
// keeps one version of the weights.
func checkTwoBWRun(p *plan.Plan, backend string, emulate bool) error {
	k, _ := microbatch.KindOf(p.Schedule)
	if !k.NoFlush || twoVersionsWhy(backend, emulate) == "" {
		return nil
	}
	return usagef("--backend %s: the plan's schedule %s keeps two versions of every stage's weights, which the workers keep on the cpu backend only", backend, p.Schedule)
}

// weightsLine is explain's word on a plan whose schedule has no flush:
// two versions of the weights and what the second costs a device; "" for
// a synchronous plan.
func weightsLine(p *plan.Plan) string {
	k, _ := microbatch.KindOf(p.Schedule)
	if !k.NoFlush {
		return ""
	}
	var most int64
	for _, s := range p.Stages {
		most = max(most, s.Params*(4+plan.WeightCopyBytes(p.PrecisionName())))
	}
	return fmt.Sprintf("two versions a stage, no flush between iterations, gradients one update stale (W(t+1) = W(t) - lr·grad f(W(t-1))); the second version takes up to %.3g GB a device", float64(most)/1e9)
}
