package main

import (
	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/profile"
)

// hostMemory is this machine's memory, or 0 when unknown (tests replace it).
var hostMemory = profile.HostMemory

// The host-memory terms run and train use (package profile's).
const (
	hostShare     = profile.HostShare
	estimateSlack = profile.EstimateSlack
)

// checkHost refuses, as a usage error naming flag, what needs more than
// hostShare of this host's memory; an unknown host size passes.
func checkHost(flag, what string, need float64) error {
	have := hostMemory()
	if profile.Fits(need, have) {
		return nil
	}
	return usagef("%s: %s needs about %.3g GB, over %.0f%% of the %.3g GB of this host", flag, what, need/1e9, 100*hostShare, float64(have)/1e9)
}

func trainNeed(g *dag.Graph, batch, micro int, optBytes float64) float64 {
	return profile.TrainNeed(g, batch, micro, optBytes)
}

func planNeed(p *plan.Plan) float64 { return profile.PlanNeed(p) }
