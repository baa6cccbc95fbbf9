package profile

import (
	"fmt"
	"os"
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
	batch := sizes[len(sizes)-1]
	if t.Inputs, err = timeInputs(g, batch, minTime/10); err != nil {
		return nil, err
	}
	t.InputBatch = int64(batch)
	return t, t.Validate()
}

// timeInputs times making each of g's inputs for a batch of batch samples,
// as a worker that reads it makes it each iteration (the model's synthetic
// data; a target with its teacher's labels): the median of runs over
// minTime (at least 3), each a batch of a step of its own.
func timeInputs(g *dag.Graph, batch int, minTime time.Duration) (map[string]float64, error) {
	d, err := stage.NewDataset(g)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, in := range g.Inputs() {
		var times []float64
		for start, step := time.Now(), 0; time.Since(start) < minTime || len(times) < 3; step++ {
			t := time.Now()
			if _, err := d.Inputs(step, batch, map[string]bool{in.Name: true}); err != nil {
				return nil, err
			}
			times = append(times, time.Since(t).Seconds())
		}
		out[in.Name] = median(times)
	}
	return out, nil
}

// MicroBatches are the sizes op times are measured at for a batch: every
// power of two up to it, and the batch itself.
func MicroBatches(batch int64) []int {
	var sizes []int
	for m := int64(1); m <= batch; m *= 2 {
		sizes = append(sizes, int(m))
	}
	if len(sizes) > 0 && int64(sizes[len(sizes)-1]) != batch {
		sizes = append(sizes, int(batch))
	}
	return sizes
}

// OpTimesNeed is the memory, in bytes, that timing g's ops at micro-batch
// micro holds: the whole model runs at that size, with its parameters, their
// gradients, and every output and stash of a micro-batch.
func OpTimesNeed(g *dag.Graph, micro int) int64 {
	tot := g.Total()
	return 8*tot.Params + int64(micro)*(tot.OutBytes+tot.StashBytes)
}

// Memory is what ops timed on dev may hold: the GPU's memory, or this
// host's for the CPU (dev nil) and the emulator.
func Memory(dev *cuda.Device) int64 {
	if dev != nil && !dev.Emulated {
		return int64(dev.Memory)
	}
	return cpuMeter{}.memory()
}

// Where names the device op times are taken on, as the op-times file
// records it: the CPU with this host's name, or the GPU's name.
func Where(dev *cuda.Device) string {
	if dev != nil {
		return dev.Name
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("cpu (%s)", host)
}
