package main

import (
	"bufio"
	"fmt"
	"math"
	"os"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
)

// hostMemory is this machine's memory, or 0 when unknown (tests replace it).
var hostMemory = memTotal

// memTotal is MemTotal in /proc/meminfo, or 0 when it cannot be read.
func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kb int64
		if _, err := fmt.Sscanf(sc.Text(), "MemTotal: %d kB", &kb); err == nil {
			return kb << 10
		}
	}
	return 0
}

// hostShare is the part of the host's memory a run may plan to use: the rest
// is the OS, the NATS server, buffers, and the estimate's own error.
const hostShare = 0.9

// estimateSlack covers what the cost model's bytes leave out: the heap at its
// peak, measured against the predicted peak of one process training a
// 2-branch MMT of 1 layer at micro-batch 8 (1.36 against 1.11 GB) and of 2
// layers at sequence 128 (1.43 against 1.28 GB); the runtime's buffers.
const estimateSlack = 1.25

// checkHost refuses, as a usage error naming flag, what needs more than
// hostShare of this host's memory; an unknown host size passes.
func checkHost(flag, what string, need float64) error {
	have := float64(hostMemory())
	if have == 0 || need <= hostShare*have {
		return nil
	}
	return usagef("%s: %s needs about %.3g GB, over %.0f%% of the %.3g GB of this host", flag, what, need/1e9, 100*hostShare, have/1e9)
}

// trainNeed is what one process training g holds at its peak: weights,
// gradients and optimizer state; one batch of inputs; one micro-batch's
// outputs and stash. Float64 arithmetic: an absurd batch must not wrap.
func trainNeed(g *dag.Graph, batch, micro int, optBytes float64) float64 {
	t := g.Total()
	in := 0.0
	for _, x := range g.Inputs() {
		in += float64(x.Shape.Elems()) * float64(x.DType.Size())
	}
	return float64(t.Params)*(8+optBytes) + float64(batch)*in + float64(micro)*float64(t.OutBytes+t.StashBytes)
}

// planNeed is what a plan's local workers hold together: every device's
// predicted peak (one worker per device).
func planNeed(p *plan.Plan) float64 {
	need := 0.0
	for _, s := range p.Stages {
		if s.PeakBytes == math.MaxInt64 { // saturated: fits nowhere
			return math.Inf(1)
		}
		need += float64(s.PeakBytes) * float64(len(s.Devices))
	}
	return need
}
