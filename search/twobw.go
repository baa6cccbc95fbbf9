package search

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/plan"
)

// Pricing a schedule without a flush (2bw, microbatch.TwoBW). A stage
// keeps a second version of its weights, the one its batch's passes read
// while the optimizer steps the newest: a float32 copy and, where the
// precision has one, its copy for the products (versionB a parameter,
// with the weights, whatever the placement of the optimizer's state);
// each step first copies the newest into it (turnB of memory traffic a
// parameter, in the flush, all of them on every replica whatever the
// placement: turn). The flush itself is still paid by every stage
// once an iteration, but not by the pipeline: the simulator plays the
// iterations back to back and prices the steady state's period, with no
// fill and no drain. A plan whose first stage would run more than a batch
// ahead of its update (depth − 1 > micro-batches) would keep weights two
// updates stale: the planners leave it out (tooStale) and the chosen
// plan's notes say how many they left.

// AutoAsync is the Schedule that lets the search weigh 2bw, whose
// gradients are one update stale, against the synchronous 1f1b, and keep
// the faster; every other schedule trains synchronously but 2bw.
const AutoAsync = "auto-async"

// asyncWeighed are the schedules AutoAsync weighs, the synchronous first.
var asyncWeighed = []string{"1f1b", "2bw"}

// versions sets the cost model's second version of the weights for
// schedule k.
func (cm *costModel) versions(k microbatch.ScheduleKind) {
	if k.NoFlush {
		cm.versionB, cm.turnB = 4+cm.copyB, 8
	}
}

// turn is what a stage of params parameters spends before its step
// copying its newest weights into its second version (none with one
// version), slowed by slow: every replica copies all of them.
func (cm *costModel) turn(params int64, slow float64) float64 {
	if cm.turnB == 0 || params <= 0 {
		return 0
	}
	return slow * float64(params) * float64(cm.turnB) / cm.dev.MemBW
}

// staleLeft counts the plans the planners left out as too stale.
type staleLeft struct{ n atomic.Int64 }

// tooStale says whether plan p, whose schedule has no flush, would run a
// stage more than a batch ahead of its update: a stage at depth d (1 +
// its longest path to a sink) runs d − 1 forwards ahead.
func tooStale(p *plan.Plan) bool {
	depth, err := p.Pipeline().Depth()
	if err != nil {
		return false // the schedule's check says what is wrong
	}
	for _, d := range depth {
		if d-1 > p.MicroBatches {
			return true
		}
	}
	return false
}

// staleNote is the chosen plan's note on the n plans left out as too
// stale.
func staleNote(n int64) string {
	return fmt.Sprintf("2bw: %d candidate plan(s) left out, deeper than their micro-batches per batch + 1: a stage would run more than a batch ahead of its update (weights two updates stale)", n)
}

// noFlushFloor is a bound from below on the period of a schedule without
// a flush: every stage runs each micro-batch's passes and its flush once
// an iteration, one after another.
func noFlushFloor(pipe microbatch.Pipeline, t microbatch.Timing) float64 {
	floor := 0.0
	for s := 0; s < pipe.Stages; s++ {
		floor = max(floor, float64(pipe.MicroBatches)*(t.F[s]+t.B[s]+at(t.W, s))+at(t.Flush, s))
	}
	return floor
}

// flushOnly is why a plan of g under o cannot train without a flush, ""
// where it can: the run's own reason (Options.FlushOnly), selective
// backprop (a batch's kept samples depend on its losses, not yet
// accounted when the next batch's forwards run) or an op with buffers
// (batch_norm's running statistics, which the forwards run ahead of an
// update would move). The runtime refuses each (runtime.Job.Validate).
func flushOnly(g *dag.Graph, o Options) string {
	if o.FlushOnly != "" {
		return o.FlushOnly
	}
	if o.BackpropFraction > 0 {
		return "--selective-backprop keeps samples by losses the next batch's forwards run before"
	}
	for i := 0; i < g.NumOps(); i++ {
		if b := g.Buffers(i); len(b) > 0 {
			return fmt.Sprintf("op %q keeps buffers (%s), which the forwards run ahead of an update would move", g.Op(i).Name, b[0].Key)
		}
	}
	return ""
}

// checkNoFlush refuses a schedule without a flush for a plan that could
// not train with it: a plan the run would refuse is no plan.
func checkNoFlush(g *dag.Graph, o Options) error {
	if !o.sched.NoFlush {
		return nil
	}
	if why := flushOnly(g, o); why != "" {
		return &OptionError{"schedule", fmt.Sprintf("%s: %s; use a flushed schedule", o.Schedule, why)}
	}
	return nil
}

// searchAsync is Search under AutoAsync: a search for each schedule it
// weighs, the fastest plan kept (the synchronous one on a tie), its notes
// saying what the others predicted. A schedule that fits nothing is left
// out; where none fits, the synchronous one's error. Where the plan could
// not train without a flush (flushOnly), the synchronous schedule alone,
// the notes saying why.
func searchAsync(g *dag.Graph, o Options, tu tuning) (*plan.Plan, error) {
	var plans []*plan.Plan
	var notes []string
	var first error
	weighed := asyncWeighed
	if why := flushOnly(g, o); why != "" {
		weighed = asyncWeighed[:1]
		notes = append(notes, fmt.Sprintf("schedule %s: %s not weighed: %s", AutoAsync, asyncWeighed[1], why))
	}
	for _, s := range weighed {
		o.Schedule = s
		p, err := searchTuned(g, o, tu)
		var np *NoPlanError
		switch {
		case errors.As(err, &np):
			if first == nil {
				first = err
			}
			notes = append(notes, fmt.Sprintf("schedule %s: %s had no plan (%v)", AutoAsync, s, err))
			continue
		case err != nil:
			return nil, err
		}
		plans = append(plans, p)
	}
	if len(plans) == 0 {
		return nil, first
	}
	best := plans[0]
	for _, p := range plans[1:] {
		if p.Predicted.SamplesPerS > best.Predicted.SamplesPerS {
			best = p
		}
	}
	for _, p := range plans {
		if p != best {
			notes = append(notes, fmt.Sprintf("schedule %s (stale weights allowed): %s predicts %.4g samples/s at %.3g GB a device, %s %.4g at %.3g GB",
				AutoAsync, best.Schedule, best.Predicted.SamplesPerS, float64(best.Predicted.PeakMemory)/1e9, p.Schedule, p.Predicted.SamplesPerS, float64(p.Predicted.PeakMemory)/1e9))
		}
	}
	best.Search.Notes = append(best.Search.Notes, notes...)
	return best, nil
}
