package search

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/graphpipe/graphpipe/plan"
)

// Where a stage's optimizer state lives (plan.StatePlacements), as the cost
// model prices it. A stage on k devices is priced first at its primary
// placement (primary): sharded where k > 1 and the options let the planner
// shard (a sharded stage sends the ring all-reduce's bytes and steps 1/k
// of its parameters, so it is never slower and holds less), in host memory
// where the options put every stage's state there, else replicated. With
// --optimizer-state auto the DP may also spill a stage's state to host
// memory where keeping it on the device does not fit (spillAt), as it may
// let a stage recompute: a solution's stage spills only where its primary
// placement does not fit.
type placement uint8

const (
	placeReplicated placement = iota
	placeSharded
	placeHost
	// placeStreamed is placeHost with the weights and gradients in host
	// memory too, each op's streamed in ahead of use, double-buffered, in
	// every micro-batch's forward and backward (Hydra's spilling): only on
	// one device, and only where the run can do it (Options.NoStreaming).
	placeStreamed
)

// The placement options a search takes (Options.OptimizerState).
const (
	StateAuto = "auto"
)

// stateChoices are Options.OptimizerState's values, the default first.
var stateChoices = append([]string{StateAuto}, plan.StatePlacements...)

// checkState refuses an OptimizerState that is not one of stateChoices.
func checkState(s string) error {
	if slices.Contains(stateChoices, s) {
		return nil
	}
	return &OptionError{"optimizer-state", fmt.Sprintf("unknown choice %q (known: %s)", s, strings.Join(stateChoices, ", "))}
}

// name is the placement as a plan records it.
func (p placement) name() string {
	switch p {
	case placeSharded:
		return plan.StateSharded
	case placeHost, placeStreamed:
		return plan.StateHost
	}
	return plan.StateReplicated
}

// placementOf is the placement a plan's stage records.
func placementOf(st *plan.PlanStage) placement {
	switch {
	case st.StreamWeights:
		return placeStreamed
	case st.StateName() == plan.StateSharded:
		return placeSharded
	case st.StateName() == plan.StateHost:
		return placeHost
	}
	return placeReplicated
}

// primary is the placement a stage on k devices is priced at first (see
// placement); host where the options put every stage's state in host
// memory, which spill then refines.
func (cm *costModel) primary(k int) placement {
	switch {
	case cm.state == plan.StateHost:
		return placeHost
	case k > 1 && (cm.state == StateAuto || cm.state == plan.StateSharded):
		return placeSharded
	}
	return placeReplicated
}

// mayStream says whether a stage on k devices may stream its weights.
func (cm *costModel) mayStream(k int) bool { return cm.stream && k == 1 }

// placedStatic is the bytes per device of blk's parameters at placement pl
// on k devices: weights, gradients and their precision's copy, and the
// optimizer state, all of it or 1/k (sharded) or none (host); streamed, two
// of its ops' weights (in the precision's copy, where it has one) and
// gradients, the one in use and the next.
func (cm *costModel) placedStatic(pl placement, blk *block, k int) int64 {
	switch pl {
	case placeSharded:
		return satAdd(satMul(blk.params, 8+cm.copyB+cm.versionB), satMul(ceilDiv(blk.params, int64(k)), cm.optBytes))
	case placeHost:
		return satMul(blk.params, 8+cm.copyB+cm.versionB)
	case placeStreamed:
		return satMul(blk.maxParams, 2*(cm.streamB+4))
	}
	return cm.static(blk.params)
}

// placedFlush is a stage's once-per-iteration work at placement pl, given
// ar, its gradients' all-reduce across its k replicas (a sharded stage's
// reduce-scatter and all-gather move the same bytes): the optimizer step
// on the device, on 1/k of the parameters (sharded), or on the host after
// the gradients come down and before the weights go back up (host: the
// runtime does not overlap these copies with compute, so the flush holds
// them), or on the host alone (streamed: the weights and gradients are
// there). slow slows the steps as it does the ops.
func (cm *costModel) placedFlush(pl placement, params int64, k int, ar, slow float64) float64 {
	ar += cm.turn(params, slow) // before the step: 2bw's copy of the newest weights, whole on every replica (twobw.go)
	switch pl {
	case placeSharded:
		return ar + cm.optimizerStepAt(ceilDiv(params, int64(k)), slow)
	case placeHost:
		return ar + 8*float64(params)/cm.hostBW + cm.hostStep(params, 0, slow)
	case placeStreamed:
		return ar + cm.hostStep(params, cm.copyB, slow)
	}
	return ar + cm.optimizerStepAt(params, slow)
}

// hostStep is the optimizer step on the host's cores: the gradients read,
// the weights read and written, the state read and written, the weights'
// copy made (copyB bytes a parameter: streamed weights go up in it), at
// the host's memory bandwidth shared by the node's devices, all of which
// step at the end of an iteration.
func (cm *costModel) hostStep(params, copyB int64, slow float64) float64 {
	if params <= 0 {
		return 0
	}
	share := float64(min(cm.perNode, cm.devices))
	t := float64(params) * float64(12+2*cm.optBytes+copyB) * share / cm.hostMem
	if slow != 1 {
		t *= slow
	}
	return t
}

// streamTimes are a streamed stage's forward, input-gradient and
// weight-gradient times per micro-batch: its weights come in over the host
// link during the forward, again during the backward while its gradients
// go out (the link carries both ways at once) and the host adds them to
// the iteration's (at its memory bandwidth); double-buffered, each pass
// takes its compute or its copies, whichever is longer. The backward's
// extra is spread over its two parts in proportion.
func (cm *costModel) streamTimes(params int64, f, bi, bw float64) (float64, float64, float64) {
	in := float64(params) * float64(cm.streamB) / cm.hostBW
	back := max(max(in, 4*float64(params)/cm.hostBW), 12*float64(params)/cm.hostMem)
	f = max(f, in)
	if b := bi + bw; back > b {
		if b <= 0 {
			return f, back, bw
		}
		r := back / b
		bi, bw = bi*r, bw*r
	}
	return f, bi, bw
}

// hostBytes is what placement pl copies between host memory and each
// device per iteration of mbs micro-batches: host's gradients down and
// weights up once; streamed's weights up twice and gradients down once per
// micro-batch.
func (cm *costModel) hostBytes(pl placement, params int64, mbs int) int64 {
	switch pl {
	case placeHost:
		return satMul(params, 8)
	case placeStreamed:
		return satMul(satMul(params, 2*cm.streamB+4), int64(mbs))
	}
	return 0
}

// spill is where a stage on k devices spills its state (the DP's second
// variant under auto, and every stage's under host): host memory, or
// streamed where even the weights and gradients leave no room for one
// micro-batch in flight and the stage may stream. base and stash are what
// it holds besides its static bytes, regardless and per micro-batch.
func (cm *costModel) spill(blk *block, k int, base, stash int64) placement {
	if cm.mayStream(k) && maxInFlight(satAdd(cm.placedStatic(placeHost, blk, k), base), stash, cm.limit) < 1 {
		return placeStreamed
	}
	return placeHost
}

// saved is what placement pl saves each device against replicated.
func (cm *costModel) saved(pl placement, blk *block, k int) int64 {
	if pl == placeReplicated {
		return 0
	}
	return max(0, cm.static(blk.params)-cm.placedStatic(pl, blk, k))
}

// setPlacement records stage s's placement in st: where its state lives,
// whether its weights stream, what it copies over the host link and what
// it saves each device.
func setPlacement(st *plan.PlanStage, s stageIn, cm *costModel) {
	if s.cost.place == placeReplicated {
		return
	}
	st.OptimizerState = s.cost.place.name()
	st.StreamWeights = s.cost.place == placeStreamed
	st.HostCopyBytes = s.cost.host
	st.StateSavedBytes = cm.saved(s.cost.place, s.blk, s.k)
}

// spillCost is block id's price on the devices of device set kv with its
// state spilled (spill).
func (d *prices) spillCost(id, kv int) stageCost {
	t, k := d.devs.part(kv)
	most := d.mbs
	if !d.gpipe {
		most = min(d.mbs, d.D)
	}
	return d.sp.spillPrice(d.kinds[t], id, k*d.devs.g[t], d.b, d.mbs, most)
}

// spillMayHelp says whether letting stages spill their state to host
// memory could find a plan below T (+Inf: where keeping finds none on
// every device): only where the options let the DP choose (auto) and some
// stage meets T spilling and then holds more micro-batches in flight than
// keeping its state on the device (spillHelp, priced with fit).
func (d *prices) spillMayHelp(T float64) bool {
	return d.cm.state == StateAuto && d.spillHelp < T
}

// spillAt solves d's micro-batch again with spilling allowed, where it may
// help (spillMayHelp), and puts that plan first in out when it reaches
// more devices or a shorter bottleneck than keeping did (keep: d's least
// bottleneck) and simulates faster, as recomputeAt does for recomputing.
// It returns the prices it solved with (nil where it did not).
func (pl *planner) spillAt(d *dp, keep least, out *sized) (*prices, error) {
	T := math.Inf(1)
	if keep.ok && keep.k == d.devs.full {
		T = keep.T
	}
	if !d.spillMayHelp(T) {
		return nil, nil
	}
	r := &dp{prices: d.spilled()}
	r.allowRecompute() // the second variant: spilled
	k2, T2, ok2 := r.minTOnMost(r.D)
	if !ok2 || keep.ok && k2 == keep.k && T2 >= keep.T {
		return r.prices, nil
	}
	p, err := pl.assemble(r, k2)
	if err != nil || !p.Predicted.Feasible || len(out.plans) > 0 && !better(p, out.plans[0]) {
		return r.prices, err
	}
	out.plans = append([]*plan.Plan{p}, out.plans...)
	out.k, out.T, out.at, out.rec, out.spill = k2, T2, r.depth(k2), true, true
	return r.prices, nil
}
