package search

import (
	"fmt"
	"math"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
)

// Refusals before any search: bounds that need no plan. Every op lies in
// some stage, on at most all the devices, at a micro-batch no smaller than
// the smallest the search would try, so a stage holding it needs at least
// the op's weights, gradients and optimizer state and one micro-batch of
// its activations (what it stashes for backward, its output and the output's
// gradient; a recomputing stage holds one micro-batch's full activations
// during its backward, so the bound holds for it too); and every op's state
// is held on at least one device, so the model's total state cannot exceed
// the cluster's memory. refuse checks both before Search does anything else,
// so that a model that cannot fit is told so at once rather than after the
// whole search.

// refuse returns a NoPlanError with Bound set when a bound that needs no
// plan already rules every plan out.
func refuse(g *dag.Graph, o *Options) error {
	bmin := o.smallestMicroBatch()
	devices := int64(o.Devices)
	var total, biggest int64
	biggestOp := ""
	worst, worstNeed, worstStatic, worstAct, worstM := -1, int64(0), int64(0), int64(0), int64(0)
	for i := 0; i < g.NumOps(); i++ {
		c := g.Cost(i)
		static := o.stateBytes(c.Params)
		total = satAdd(total, static)
		if static > biggest || biggestOp == "" {
			biggest, biggestOp = static, g.Op(i).Name
		}
		m := ceilDiv(bmin, devices) // per device, on every device
		if g.Op(i).Kind.MixesSamples() {
			m = bmin // a whole micro-batch on one device
		}
		act := satMul(o.activationBytes(c), m)
		if need := satAdd(static, act); worst < 0 || need > worstNeed {
			worst, worstNeed, worstStatic, worstAct, worstM = i, need, static, act, m
		}
	}
	if worstNeed > o.MemoryLimit { // the op that needs the most
		name := g.Op(worst).Name
		return &NoPlanError{Reason: opTooBig(o, name, worstStatic, worstAct, worstM, bmin), Op: name, Need: worstNeed, Limit: o.MemoryLimit, Bound: true}
	}
	if cluster := satMul(devices, o.MemoryLimit); total > cluster && !o.streams() {
		return &NoPlanError{Reason: fmt.Sprintf("memory: the model's weights, gradients and optimizer state take %s in all, over the %s that %s of %s hold (its largest op, %q, holds %s)",
			gb(total), gb(cluster), count(o.Devices, "device"), gb(o.MemoryLimit), biggestOp, gb(biggest)), Op: biggestOp, Need: total, Limit: cluster, Bound: true}
	}
	return nil
}

// opTooBig says why one op fits no device, holding m samples of a
// micro-batch of at least bmin.
func opTooBig(o *Options, op string, static, act, m, bmin int64) string {
	if static > o.MemoryLimit {
		return fmt.Sprintf("memory: op %q alone needs %s for its weights, gradients and optimizer state, over the %s a device has", op, gb(static), gb(o.MemoryLimit))
	}
	why := fmt.Sprintf("micro-batches of at least %d (the batch of %d in at most %d micro-batches per iteration)", bmin, o.Batch, plan.MicroBatchLimit)
	if o.MicroBatch > 0 {
		why = fmt.Sprintf("micro-batch %d", bmin)
	}
	return fmt.Sprintf("memory: op %q alone needs %s: %s for its weights, gradients and optimizer state and %s for the activations of %s (%s over %s), over the %s a device has",
		op, gb(satAdd(static, act)), gb(static), gb(act), count(int(m), "sample"), why, count(o.Devices, "device"), gb(o.MemoryLimit))
}

// count is "1 device" or "n devices".
func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// refuseKinds is refuse on a cluster of several kinds: an op that fits no
// kind (its state and fewest activations on that kind's devices over each
// one's memory), or a model whose state is over every device's memory
// together.
func refuseKinds(g *dag.Graph, o *Options) error {
	var cluster, total int64
	for _, k := range o.Cluster.Kinds {
		cluster = satAdd(cluster, satMul(int64(k.Devices), k.MemoryLimit))
	}
	for i := 0; i < g.NumOps(); i++ {
		total = satAdd(total, o.stateBytes(g.Cost(i).Params))
		var least *NoPlanError // the kind it misses by the least
		for _, k := range o.Cluster.Kinds {
			one := o.kindAlone(k)
			static, act, m, bmin := opNeed(g, &one, i)
			need := satAdd(static, act)
			if need <= k.MemoryLimit {
				least = nil
				break
			}
			if least == nil || need-k.MemoryLimit < least.Need-least.Limit {
				least = &NoPlanError{Reason: opTooBig(&one, g.Op(i).Name, static, act, m, bmin) + " (a " + k.Name() + ", the kind it misses by the least)",
					Op: g.Op(i).Name, Need: need, Limit: k.MemoryLimit, Bound: true}
			}
		}
		if least != nil {
			return least
		}
	}
	if total > cluster && !o.streams() {
		return &NoPlanError{Reason: fmt.Sprintf("memory: the model's weights, gradients and optimizer state take %s in all, over the %s that the cluster's %s hold",
			gb(total), gb(cluster), count(o.Devices, "device")), Need: total, Limit: cluster, Bound: true}
	}
	return nil
}

// opNeed is what op i needs at least on a device of o's: its state, and its
// fewest activations (m samples of micro-batches of at least bmin).
func opNeed(g *dag.Graph, o *Options, i int) (static, act, m, bmin int64) {
	bmin = o.smallestMicroBatch()
	c := g.Cost(i)
	static = o.stateBytes(c.Params)
	m = ceilDiv(bmin, int64(o.Devices)) // per device, on every device
	if g.Op(i).Kind.MixesSamples() {
		m = bmin // a whole micro-batch on one device
	}
	act = satMul(o.activationBytes(c), m)
	return static, act, m, bmin
}

// gb renders bytes in GB, as the planner's messages do.
func gb(b int64) string { return fmt.Sprintf("%.3g GB", float64(b)/1e9) }

// smallestMicroBatch is the smallest micro-batch the search would try: the
// forced one, or the smallest of microBatches and smallerMicroBatches.
func (o *Options) smallestMicroBatch() int64 {
	b := o.microBatches()[0]
	if s := o.smallerMicroBatches(); len(s) > 0 {
		b = s[len(s)-1]
	}
	return b
}

// stateBytes is what params parameters of one op hold on a device at
// least, at the placements the options allow (state.go): weights,
// gradients, the weights' copy in the precision and the optimizer state
// (replicated); 1/Devices of the state (sharded); none of it (host); two
// ops' weights and gradients (streamed).
func (o *Options) stateBytes(params int64) int64 {
	copyB := plan.WeightCopyBytes(o.Precision)
	least := int64(math.MaxInt64)
	if o.OptimizerState != plan.StateHost {
		least = satMul(params, 8+o.OptimizerBytes+copyB)
	}
	if o.OptimizerState == StateAuto || o.OptimizerState == plan.StateSharded {
		least = min(least, satAdd(satMul(params, 8+copyB), satMul(ceilDiv(params, int64(o.Devices)), o.OptimizerBytes)))
	}
	if o.spills() {
		least = min(least, satMul(params, 8+copyB))
		if streamB := copyB; !o.NoStreaming {
			if streamB == 0 {
				streamB = 4 // float32 weights
			}
			least = min(least, satMul(params, 2*(streamB+4)))
		}
	}
	return least
}

// spills says whether the options let a stage's state live in host memory.
func (o *Options) spills() bool {
	return o.OptimizerState == StateAuto || o.OptimizerState == plan.StateHost
}

// streams says whether the options let a stage stream its weights: then
// no bound holds the model's total state to the devices' memory.
func (o *Options) streams() bool { return o.spills() && !o.NoStreaming }

// activationBytes is what an op holds per sample at least: its stash and
// its output and the output's gradient, in the precision's bytes.
func (o *Options) activationBytes(c dag.Cost) int64 {
	b := satAdd(c.StashBytes, satMul(2, c.OutBytes))
	if a := plan.ActivationBytes(o.Precision); a != 4 {
		b = satMul(b, a) / 4
	}
	return b
}
