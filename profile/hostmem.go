package profile

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
)

// HostMemory is this machine's memory in bytes: MemTotal in /proc/meminfo,
// or 0 when it cannot be read.
func HostMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	return memTotal(f)
}

// memTotal is the MemTotal line of a /proc/meminfo, in bytes, or 0 when it
// has none.
func memTotal(r io.Reader) int64 {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var kb int64
		if _, err := fmt.Sscanf(sc.Text(), "MemTotal: %d kB", &kb); err == nil {
			return kb << 10
		}
	}
	return 0
}

// HostShare is the part of the host's memory a run may plan to use: the rest
// is the OS, the NATS server, buffers, and the estimate's own error.
const HostShare = 0.9

// EstimateSlack covers what the cost model's bytes leave out: the heap at its
// peak above the predicted peak (the Go collector's headroom) and the
// runtime's buffers; it was set from measured training peaks (BENCHMARKS.md's
// history).
const EstimateSlack = 1.25

// Fits says whether need bytes fit in HostShare of a host of have bytes; an
// unknown host size (0) fits anything.
func Fits(need float64, have int64) bool {
	return have == 0 || need <= HostShare*float64(have)
}

// TrainNeed is what one process training g holds at its peak: weights,
// gradients and optimizer state (optBytes per parameter); one batch of
// inputs; one micro-batch's outputs and stash. Float64 arithmetic: an absurd
// batch must not wrap.
func TrainNeed(g *dag.Graph, batch, micro int, optBytes float64) float64 {
	t := g.Total()
	in := 0.0
	for _, x := range g.Inputs() {
		in += float64(x.Shape.Elems()) * float64(x.DType.Size())
	}
	return float64(t.Params)*(8+optBytes) + float64(batch)*in + float64(micro)*float64(t.OutBytes+t.StashBytes)
}

// PlanNeed is what a plan's local workers hold together: every device's
// predicted peak (one worker per device).
func PlanNeed(p *plan.Plan) float64 {
	need := 0.0
	for _, s := range p.Stages {
		if s.PeakBytes == math.MaxInt64 { // saturated: fits nowhere
			return math.Inf(1)
		}
		need += float64(s.PeakBytes) * float64(len(s.Devices))
	}
	return need
}
