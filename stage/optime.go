package stage

import (
	"fmt"
	"slices"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// OpTiming is one op's measured time per call, at each micro-batch size, of
// its three passes through an Executor: forward, the gradient for its inputs
// and the gradient for its weights.
type OpTiming struct {
	MicroBatch []int64
	Forward    []float64
	InputGrad  []float64
	WeightGrad []float64
}

// TimeOps times every op of g at each micro-batch size, on the CPU backend,
// or on dev if it is not nil (synchronising after every op: see
// Executor.SyncOps), in context: the whole model runs forward, backward for the inputs, then
// backward for the weights, on its own synthetic data, and each op's share of
// each pass is read from the executor's per-op clock (Executor.OpSeconds),
// with an equal share of what the pass took beyond its ops' clocks (spreadPass).
// Timed one op at a time in a loop, an op finds its data in cache and runs
// faster than it does in a stage, and predicts a run short (bench/history.md
// has the figures). The passes repeat until minTime has passed at a size (at least three times);
// each op keeps its mean per pass (a run's throughput pays for its slow
// calls too). progress, if not nil, is told each size
// timed.
func TimeOps(g *dag.Graph, sizes []int, minTime time.Duration, dev *cuda.Device, progress func(m int)) (map[string]*OpTiming, error) {
	if len(sizes) == 0 || !slices.IsSorted(sizes) || sizes[0] < 1 {
		return nil, fmt.Errorf("stage: micro-batch sizes must be positive and ascending, got %v", sizes)
	}
	all := allOps(g)
	ex, err := NewExecutor(g, all, g.Seed(), DeviceBackend(dev))
	if err != nil {
		return nil, err
	}
	defer ex.Close()
	ex.SyncOps = dev != nil
	data, err := NewDataset(g)
	if err != nil {
		return nil, err
	}
	out := map[string]*OpTiming{}
	for i := range all {
		out[g.Op(i).Name] = &OpTiming{}
	}
	for _, m := range sizes {
		feeds, err := data.Batch(0, m)
		if err != nil {
			return nil, err
		}
		reps, err := timePasses(ex, g, feeds, minTime)
		if err != nil {
			return nil, fmt.Errorf("stage: timing the ops at micro-batch %d: %w", m, err)
		}
		for i := range all {
			name := g.Op(i).Name
			t := out[name]
			t.MicroBatch = append(t.MicroBatch, int64(m))
			t.Forward = append(t.Forward, meanOf(reps[name][0]))
			t.InputGrad = append(t.InputGrad, meanOf(reps[name][1]))
			t.WeightGrad = append(t.WeightGrad, meanOf(reps[name][2]))
		}
		if progress != nil {
			progress(m)
		}
	}
	return out, nil
}

// timePasses runs the whole model's three passes on feeds until minTime has
// passed (after one warm-up, at least three times) and returns, per op, each
// repetition's seconds in each pass.
func timePasses(ex *Executor, g *dag.Graph, feeds map[string]*Value[float32], minTime time.Duration) (map[string]*[3][]float64, error) {
	loss := g.Op(g.Loss()).Name
	seed := map[string]*Value[float32]{loss: {Shape: []int{1}, Data: []float32{1}}}
	reps := map[string]*[3][]float64{}
	for name := range ex.OpSeconds {
		reps[name] = &[3][]float64{}
	}
	start := time.Now()
	for r := -1; r < 3 || time.Since(start) < minTime && r < 10000; r++ { // r = -1 warms up
		if r == 0 {
			start = time.Now()
		}
		var marks [4]map[string][2]float64
		var walls [4]time.Time
		marks[0], walls[0] = clock(ex), time.Now()
		if _, err := ex.Forward(0, Position{Step: r + 1}, feeds); err != nil {
			return nil, err
		}
		walls[1], marks[1] = time.Now(), clock(ex)
		if _, err := ex.Backward(0, seed, false); err != nil {
			return nil, err
		}
		walls[2], marks[2] = time.Now(), clock(ex)
		if err := ex.Weights(0); err != nil {
			return nil, err
		}
		walls[3], marks[3] = time.Now(), clock(ex)
		if err := ex.ZeroGrads(); err != nil {
			return nil, err
		}
		if r < 0 {
			continue
		}
		for pass := range 3 {
			at := min(pass, 1) // the backward clock counts passes 1 and 2
			times := map[string]float64{}
			for name := range reps {
				times[name] = marks[pass+1][name][at] - marks[pass][name][at]
			}
			spreadPass(times, walls[pass+1].Sub(walls[pass]).Seconds())
			for name, rep := range reps {
				rep[pass] = append(rep[pass], times[name])
			}
		}
	}
	return reps, nil
}

// spreadPass adds to the ops that ran in a pass (a time above zero) equal
// shares of what the pass took beyond their clocks, wall seconds in all: the
// executor's work between ops that no op's clock counts (the pass's maps of
// values and stashes, the loss's seed, the inputs' gradients handed back).
// A stage's pass pays it too, about in proportion to its ops; for a model
// of small ops it is a tenth of a pass (bench/history.md).
func spreadPass(times map[string]float64, wall float64) {
	sum, ran := 0.0, 0
	for _, t := range times {
		if t > 0 {
			sum, ran = sum+t, ran+1
		}
	}
	if ran == 0 || wall <= sum {
		return
	}
	share := (wall - sum) / float64(ran)
	for name, t := range times {
		if t > 0 {
			times[name] = t + share
		}
	}
}

// clock copies the executor's per-op clocks.
func clock(ex *Executor) map[string][2]float64 {
	out := make(map[string][2]float64, len(ex.OpSeconds))
	for name, t := range ex.OpSeconds {
		out[name] = *t
	}
	return out
}

// meanOf is the mean, not the median: a run's throughput pays for its slow
// calls too (garbage collection, the scheduler).
func meanOf(v []float64) float64 {
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v))
}
