package search

import (
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/plan"
)

// tuneShared is tune, then the plan's sharing of its hosts priced again
// (reshare): stages run further ahead are busy at once more often.
func tuneShared(p *plan.Plan, k microbatch.ScheduleKind, cm *costModel) error {
	var plain *plan.Plan
	if gathersLate(p) { // tuned for its late all-gathers, the plan may lose to itself without them
		plain = withGathersInFlush(p, cm)
	}
	if err := tuneLate(p, k, cm); err != nil {
		return err
	}
	if plain == nil {
		return nil
	}
	if err := tuneLate(plain, k, cm); err != nil {
		return err
	}
	if plain.Predicted.IterationS < p.Predicted.IterationS {
		*p = *plain
	}
	return nil
}

// tuneLate tunes p's warm-up, prices its cores' sharing again and moves
// its all-gathers where that makes it faster (lateGathers).
func tuneLate(p *plan.Plan, k microbatch.ScheduleKind, cm *costModel) error {
	if err := tune(p, k, cm.tu.tuneFloor); err != nil {
		return err
	}
	if err := reshare(p, cm); err != nil {
		return err
	}
	return lateGathers(p, cm)
}

// tuneBudget is how many actions the warm-up tuning of one plan may simulate
// in all: a plan's list lengths times the simulations it tries.
const tuneBudget = 2_000_000

// tune raises the warm-up counts of the plan's schedule, of kind k, from
// Warmup's, where k is Tunable (1f1b, zb), while the simulator finds the
// iteration shorter and every stage still fits in memory. Warmup's rule is a steady-state one; an iteration of few
// micro-batches, or of unequal stages, can gain from running further ahead
// (the faster stages' forwards then wait less on the slow ones' backwards).
// Each round tries, stage by stage, one more and twice as many, raising the
// stages before it to stay ahead, and keeps the first that helps; it stops
// when a round finds nothing or the budget is spent, or when the iteration
// is at its bound (iterationFloor): no warm-up can then shorten it, and the
// round would find nothing (where atFloor: tuning.tuneFloor). Deterministic.
func tune(p *plan.Plan, k microbatch.ScheduleKind, atFloor bool) error {
	pipe, t := p.Pipeline(), p.Timing()
	cost := actions(pipe, k.Split) // per simulation
	if !k.Tunable || 2*cost > tuneBudget {
		return schedule(p) // nothing to tune, or no room to try anything
	}
	warm, err := microbatch.Warmup(pipe, t, p.MemoryLimit)
	if err != nil {
		return err
	}
	var sched *microbatch.Schedule // the best so far, built with warm
	build := func(w []int) (*microbatch.Schedule, error) {
		if sched != nil { // where k allows, only the stages whose counts changed
			return k.Rewarmed(sched, warm, w, t)
		}
		return k.Warmed(pipe, t, w)
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
	floor := iterationFloor(pipe, t, k)
	for improved := true; improved; {
		if improved = false; atFloor && floor >= cur*(1-1e-10) {
			break // every try would simulate at least cur·(1−1e−9): none is kept
		}
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

// restFloor is a bound from below on what tuneShared can make of p:
// iterationFloor with every all-gather of a sharded stage free (neither in
// its flush nor waited for by its first forward), since tuneShared moves
// them between the two (lateGathers, withGathersInFlush); none (0) where
// p's stages share a host's cores, whose shares it prices again (reshare).
func restFloor(p *plan.Plan, k microbatch.ScheduleKind, cm *costModel) float64 {
	if p.Slowdown != 0 {
		return 0
	}
	q := *p
	q.Stages = append([]plan.PlanStage(nil), p.Stages...)
	for s := range q.Stages {
		st := &q.Stages[s]
		g := cm.kind(q.KindOf(s)).gatherS(&q, s)
		if !st.GathersLate() {
			st.FlushS = max(0, st.FlushS-g)
		}
		st.GatherS = 0
	}
	return iterationFloor(q.Pipeline(), q.Timing(), k)
}

// iterationFloor is a bound from below on the iteration any 1F1B (or, if
// split, zb; without a flush, 2bw: noFlushFloor) schedule of kind k of
// pipe takes under t, whatever its warm-up counts.
// A stage's first action is its first micro-batch's forward, which waits
// for its inputs: at best the longest path of forwards and transfers from
// the stages' beginnings (first). It then runs every pass of every
// micro-batch (busy) and, after its last, its flush; the iteration's fixed
// cost comes after all. Messages' costs and holds only delay. Without the split, a stage's last pass is
// the last micro-batch's backward, and each stage before it runs its own
// after that one's gradient lands, then its flush (after, along the
// longest such path). The simulator sums the same durations one action at
// a time, at most a million of them (tuneBudget), so its rounding stays
// far within the margin tune allows (1e-10 of the iteration).
func iterationFloor(pipe microbatch.Pipeline, t microbatch.Timing, k microbatch.ScheduleKind) float64 {
	if k.NoFlush {
		return noFlushFloor(pipe, t)
	}
	split := k.Split
	n := pipe.Stages
	first, after := make([]float64, n), make([]float64, n)
	for s := range first {
		first[s] = at(t.Begin, s)
	}
	for moved := true; moved; { // longest paths: repeat until none moves (the stages form a DAG)
		moved = false
		for i, e := range pipe.Edges {
			if v := first[e[0]] + t.F[e[0]] + t.Act[i]; v > first[e[1]] {
				first[e[1]], moved = v, true
			}
		}
	}
	for s := range after {
		after[s] = at(t.Flush, s)
	}
	for moved := !split; moved; {
		moved = false
		for i, e := range pipe.Edges {
			if v := t.Grad[i] + t.B[e[0]] + after[e[0]]; v > after[e[1]] {
				after[e[1]], moved = v, true
			}
		}
	}
	floor, mbs := 0.0, float64(pipe.MicroBatches)
	for s := 0; s < n; s++ {
		busy := t.F[s] + t.B[s]
		if split {
			busy += at(t.W, s)
		}
		floor = max(floor, first[s]+mbs*busy+after[s])
	}
	return floor + t.Fixed
}

// at is v[i], 0 where v is nil.
func at(v []float64, i int) float64 {
	if v == nil {
		return 0
	}
	return v[i]
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
