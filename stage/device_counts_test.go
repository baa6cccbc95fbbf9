package stage

import (
	"testing"

	"github.com/graphpipe/graphpipe/tensor/cuda"
	"github.com/graphpipe/graphpipe/tensor/cuda/cudatest"
)

// stepCounts is what one training step of a model asks of the emulator,
// on the device from its first op to its last, in the given precision.
func stepCounts(t *testing.T, dev *cuda.Device, model, precision string, microBatches int) cuda.Counts {
	t.Helper()
	g := small(t, model)
	tr, err := NewTrainer(g, TrainOptions{Optimizer: "adam", LR: 1e-3, MicroBatch: int(g.BatchSize()) / microBatches})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Ex.UseDevice(dev); err != nil {
		t.Fatal(err)
	}
	defer tr.Ex.Close()
	if err := tr.Ex.SetPrecision(precision); err != nil {
		t.Fatal(err)
	}
	before := dev.Counts()
	if _, _, err := tr.Step(0); err != nil {
		t.Fatal(err)
	}
	return dev.Counts().Sub(before)
}

// TestStepMemsetsEmulated: a training step of mmt-small zeroes only what is
// added into: each parameter's gradient once a step, and at most one
// gradient per op output per micro-batch. The outputs that a kernel or a
// GEMM with beta 0 writes in full are not zeroed first (437 memsets a step
// when they were, 189 now).
func TestStepMemsetsEmulated(t *testing.T) {
	const mbs = 2
	g := small(t, "mmt")
	params := 0
	for i := 0; i < g.NumOps(); i++ {
		params += len(g.Params(i))
	}
	c := stepCounts(t, cudatest.Emulator(t), "mmt", "fp32", mbs)
	t.Logf("mmt-small, one step of %d micro-batches: %+v", mbs, c)
	if most := int64(params + mbs*(g.NumOps()-1)); c.Memsets > most {
		t.Errorf("%d memsets in a step: more than %d parameter gradients and %d op outputs' gradients in each of %d micro-batches",
			c.Memsets, params, g.NumOps()-1, mbs)
	}
}
