package runtime

import (
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// MeasureOpTimes times every op of g through the stage executor at each
// micro-batch size (stage.TimeOps: on the CPU, or on dev if not nil) and
// returns the times as the planner reads them, saying they were taken on
// where.
func MeasureOpTimes(g *dag.Graph, sizes []int, minTime time.Duration, dev *cuda.Device, where string, progress func(m int)) (*plan.OpTimes, error) {
	timed, err := stage.TimeOps(g, sizes, minTime, dev, progress)
	if err != nil {
		return nil, err
	}
	t := &plan.OpTimes{Format: plan.OpTimesFormat, Model: g.Name(), SHA256: plan.OpsHash(g), Device: where, Ops: map[string]plan.OpSeries{}}
	for name, s := range timed {
		t.Ops[name] = plan.OpSeries{MicroBatch: s.MicroBatch, Forward: s.Forward, InputGrad: s.InputGrad, WeightGrad: s.WeightGrad}
	}
	return t, t.Validate()
}
