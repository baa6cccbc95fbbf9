package plan

import (
	"fmt"
	"slices"
	"strings"
)

// Where a stage's optimizer state and master weights live
// (PlanStage.OptimizerState), what each replica of the stage holds, and
// what its step costs beyond the replicated one.
const (
	// StateReplicated: every replica holds the float32 weights, their
	// gradients and the whole optimizer state, all-reduces the gradients
	// and steps every parameter. Plans made before placements were part of
	// plans say nothing, and are this.
	StateReplicated = "replicated"
	// StateSharded (ZeRO stage 1) on a stage of k > 1 replicas: each holds
	// the weights and gradients and 1/k of the optimizer state; the
	// gradients are reduce-scattered, each replica steps its 1/k of the
	// parameters and the updated parameters are all-gathered: the bytes of
	// the ring all-reduce, the update on 1/k.
	StateSharded = "sharded"
	// StateHost (ZeRO-Offload, Hydra): the float32 master weights and the
	// optimizer state live in host memory and the update runs on the host's
	// cores; a step copies the gradients down and the weights back up over
	// the host link. With StreamWeights even the weights and gradients
	// stay on the host: each op's are streamed in ahead of use,
	// double-buffered, in each micro-batch's forward and backward, and its
	// gradients streamed out.
	StateHost = "host"
)

// StatePlacements are the placements a plan may name, the default first.
var StatePlacements = []string{StateReplicated, StateSharded, StateHost}

// StateName is the stage's placement: StateReplicated where the plan names
// none.
func (s PlanStage) StateName() string {
	if s.OptimizerState == "" {
		return StateReplicated
	}
	return s.OptimizerState
}

// checkState checks a stage's placement: one of StatePlacements, sharded
// only over more than one replica, streaming only from host memory.
func (p *Plan) checkState(i int, s PlanStage) error {
	st := s.StateName()
	switch {
	case !slices.Contains(StatePlacements, st):
		return planErr(i, "optimizer_state", "unknown placement %q (known: %s)", st, strings.Join(StatePlacements, ", "))
	case st == StateSharded && len(s.Devices) < 2:
		return planErr(i, "optimizer_state", "sharded over %d device: sharding needs a stage of 2 replicas or more", len(s.Devices))
	case s.StreamWeights && st != StateHost:
		return planErr(i, "stream_weights", "the weights stream from host memory: the stage's optimizer_state must be %q, got %q", StateHost, st)
	case s.HostCopyBytes < 0 || s.StateSavedBytes < 0:
		return planErr(i, "host_copy_bytes", "must not be negative, got %d (state_saved_bytes %d)", s.HostCopyBytes, s.StateSavedBytes)
	case s.GatherS > 0 && (st != StateSharded || len(s.Devices) < 2):
		return planErr(i, "gather_s", "is %g, but only a stage whose optimizer_state is %q on several devices all-gathers its parameters (it has %q on %d)", s.GatherS, StateSharded, st, len(s.Devices))
	case s.GatherBucketBytes > 0 && (st != StateSharded || len(s.Devices) < 2):
		return planErr(i, "gather_bucket_bytes", "is %d, but only a stage whose optimizer_state is %q on several devices all-gathers its parameters (it has %q on %d)", s.GatherBucketBytes, StateSharded, st, len(s.Devices))
	case s.BucketBytes > 0 && st == StateHost:
		return planErr(i, "allreduce_bucket_bytes", "is %d, but the stage's gradients go to host memory after its last pass (optimizer_state %q): its all-reduce cannot overlap the pass", s.BucketBytes, st)
	}
	return nil
}

// Streams says whether some stage of the plan streams its weights from
// host memory.
func (p *Plan) Streams() bool {
	for _, s := range p.Stages {
		if s.StreamWeights {
			return true
		}
	}
	return false
}

// Placed says whether some stage of the plan keeps its optimizer state
// anywhere but replicated on every replica.
func (p *Plan) Placed() bool {
	for _, s := range p.Stages {
		if s.StateName() != StateReplicated {
			return true
		}
	}
	return false
}

// StateWords says where a stage's state lives, for explain.
func (s PlanStage) StateWords() string {
	switch st := s.StateName(); {
	case st == StateSharded:
		return "sharded across each stage's replicas"
	case s.StreamWeights:
		return "in host memory, the weights streamed in ahead of use"
	case st == StateHost:
		return "in host memory, stepped on the host's cores"
	}
	return "replicated"
}

// GBWord is b bytes in GB, or in TB from a thousand GB.
func GBWord(b int64) string {
	if b >= 1e12 {
		return fmt.Sprintf("%.3g TB", float64(b)/1e12)
	}
	return fmt.Sprintf("%.3g GB", float64(b)/1e9)
}
