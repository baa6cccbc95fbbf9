package runtime

import (
	"fmt"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/plan"
)

// role is a worker's part of its plan, fixed from NewWorker on: the model
// and the plan, the replicas' layout, its stage's action list and timing,
// and the ops it runs. Only the worker's goroutine reads it once made, so
// it needs no lock.
type role struct {
	g      *dag.Graph
	plan   *plan.Plan
	lay    replicas
	sch    *microbatch.Schedule
	sched  []microbatch.Action // the stage's list in sch
	split  bool                // the schedule runs each backward as B (inputs) and a later W (weights)
	timing microbatch.Timing   // the plan's, each whole backward one action unless split
	ops    map[string]bool
	loss   string // the loss op's name when this stage holds it
}

// newRole is stage st's role in plan p of model g, scheduled by sch.
func newRole(g *dag.Graph, p *plan.Plan, lay replicas, sch *microbatch.Schedule, st int) role {
	// sched is every forward of a batch in order (an evaluation's): one
	// iteration alone of a schedule without a flush
	r := role{g: g, plan: p, lay: lay, sch: sch, sched: sch.Flushed().Lists[st], split: sch.Split, timing: p.Timing(), ops: map[string]bool{}}
	if !sch.Split { // a whole backward is one action
		for s := range r.timing.B {
			r.timing.B[s] += r.timing.W[s]
		}
	}
	return r
}

// takeOps looks up stage st's ops in the model: their indices, in the
// plan's order, with the model inputs they read added to reads. It
// refuses an op the model lacks, and one whose statistics span the
// micro-batch on a stage of several replicas.
func (r *role) takeOps(st int, reads map[string]bool) ([]int, error) {
	g := r.g
	var ops []int
	for _, name := range r.plan.Stages[st].Ops {
		i, ok := g.OpIndex(name)
		if !ok {
			return nil, fmt.Errorf("plan: stage %d names op %q the model lacks", st, name)
		}
		ops = append(ops, i)
		r.ops[name] = true
		for _, t := range g.OpInputs(i) {
			if t.Producer < 0 {
				reads[t.Name] = true
			}
		}
		if i == g.Loss() {
			r.loss = name
		}
		if g.Op(i).Kind.MixesSamples() && r.lay.count[st] > 1 {
			return nil, fmt.Errorf("plan: stage %d splits op %q (%s) over %d data-parallel replicas; its statistics span the micro-batch, so its stage must run on one device", st, name, g.Op(i).Kind, r.lay.count[st])
		}
	}
	return ops, nil
}
