package search

import (
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/plan"
)

// tuneBudget is how many actions the warm-up tuning of one plan may simulate
// in all: a plan's list lengths times the simulations it tries.
const tuneBudget = 2_000_000

// tune raises the plan's 1F1B (or zb) warm-up counts from Warmup's while the
// simulator finds the iteration shorter and every stage still fits in
// memory. Warmup's rule is a steady-state one; an iteration of few
// micro-batches, or of unequal stages, can gain from running further ahead
// (the faster stages' forwards then wait less on the slow ones' backwards).
// Each round tries, stage by stage, one more and twice as many, raising the
// stages before it to stay ahead, and keeps the first that helps; it stops
// when a round finds nothing or the budget is spent. Deterministic.
func tune(p *plan.Plan) error {
	pipe, t := p.Pipeline(), p.Timing()
	cost := actions(pipe, p.Schedule == "zb") // per simulation
	if (p.Schedule != "1f1b" && p.Schedule != "zb") || 2*cost > tuneBudget {
		return schedule(p) // nothing to tune, or no room to try anything
	}
	warm, err := microbatch.Warmup(pipe, t, p.MemoryLimit)
	if err != nil {
		return err
	}
	var sched *microbatch.Schedule // the best so far, built with warm
	build := func(w []int) (*microbatch.Schedule, error) {
		switch {
		case p.Schedule == "zb":
			return microbatch.ZeroBubble(pipe, t, w)
		case sched != nil: // only the stages whose counts changed
			return microbatch.OneFOneBWarmFrom(sched, warm, w)
		}
		return microbatch.OneFOneBWarm(pipe, w)
	}
	eval := func(w []int) (float64, *microbatch.Schedule, bool) {
		s, err := build(w)
		if err != nil {
			return 0, nil, false
		}
		r, err := microbatch.Summarize(s, t)
		if err != nil {
			return 0, nil, false
		}
		for s, m := range r.PeakMemory {
			if m > p.StageMemoryLimit(s) {
				return 0, nil, false
			}
		}
		return r.Iteration, s, true
	}
	cur, first, ok := eval(warm)
	sched = first
	if !ok {
		return schedule(p) // the lists it was simulated with
	}
	spent := cost
	for improved := true; improved; {
		improved = false
		for s := 0; s < len(warm) && !improved; s++ {
			for _, n := range []int{warm[s] + 1, 2 * warm[s]} {
				if n > pipe.MicroBatches || spent+cost > tuneBudget {
					continue
				}
				spent += cost
				w := raise(pipe, warm, s, n)
				if it, sc, ok := eval(w); ok && it < cur*(1-1e-9) {
					cur, sched, warm, improved = it, sc, w, true
					break
				}
			}
		}
	}
	p.SetSchedule(sched)
	return p.Predict()
}

// actions is how many actions a 1F1B (or, if split, zb) schedule of pipe
// lists: per micro-batch, each stage's passes (F, B, and W if split) and
// four per edge (activations and gradients, each sent and received).
func actions(pipe microbatch.Pipeline, split bool) int {
	passes := 2
	if split {
		passes = 3
	}
	return pipe.MicroBatches * (passes*pipe.Stages + 4*len(pipe.Edges))
}

// raise is warm with stage s at n and every stage before it at least one
// ahead of each stage after it.
func raise(pipe microbatch.Pipeline, warm []int, s, n int) []int {
	w := append([]int(nil), warm...)
	w[s] = max(w[s], n)
	for changed := true; changed; {
		changed = false
		for _, e := range pipe.Edges {
			if w[e[0]] < w[e[1]]+1 {
				w[e[0]], changed = w[e[1]]+1, true
			}
		}
	}
	return w
}
