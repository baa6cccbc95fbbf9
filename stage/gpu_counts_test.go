package stage

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// attentionCounts runs one attention op (n samples of seq tokens of width
// d, heads heads; causal or not) forward, then backward for its input and
// weights, on d's emulator, and returns what each pass asked the device.
func attentionCounts(t *testing.T, dev *cuda.Device, n, seq, d, heads int, causal bool) (fwd, bwd cuda.Counts) {
	t.Helper()
	c := opCase{"attention", fmt.Sprintf(`{"name":"x","shape":[%d,%d],"dtype":"float32"}`, seq, d),
		fmt.Sprintf(`"op":"attention","inputs":["x"],"attrs":{"heads":%d,"causal":%v}`, heads, causal)}
	g, i := oneOp(t, c)
	var devErr error
	k, err := newGPUKernel(g, i, dev, nil, &devErr, opCtx())
	if err != nil {
		t.Fatal(err)
	}
	x64, p64 := randomValues(g, i, n, rand.New(rand.NewSource(3)))
	x, p := narrow(x64), narrow(p64)
	before := dev.Counts()
	y, st, err := k.forward(x, p)
	if err != nil {
		t.Fatal(err)
	}
	mid := dev.Counts()
	gy := NewValue[float32](y.Shape...)
	k.backward(gy, x, p, y, st, seeded(x, true), seeded(p, true))
	if devErr != nil {
		t.Fatal(devErr)
	}
	return mid.Sub(before), dev.Counts().Sub(mid)
}

// TestAttentionGEMMsEmulated: attention runs its per-(sample, head)
// products as one strided batch each over every sample and head, so a
// layer's cuBLAS calls per micro-batch do not grow with the samples or the
// heads: 4 forward (the input projection, scores, context, the output
// projection) and 8 backward (the output projection's two, the context's
// two, the scores' two, the input projection's two).
func TestAttentionGEMMsEmulated(t *testing.T) {
	dev := emulatedDevice(t)
	for _, c := range []struct {
		n, seq, d, heads int
		causal           bool
	}{{4, 3, 8, 2, false}, {2, 5, 12, 4, true}, {5, 4, 4, 1, false}, {16, 2, 16, 16, true}} {
		fwd, bwd := attentionCounts(t, dev, c.n, c.seq, c.d, c.heads, c.causal)
		t.Logf("%d samples, %d heads: %d GEMMs forward, %d backward; %d and %d launches; %d and %d memsets",
			c.n, c.heads, fwd.GEMMs, bwd.GEMMs, fwd.Launches, bwd.Launches, fwd.Memsets, bwd.Memsets)
		if fwd.GEMMs != 4 || bwd.GEMMs != 8 {
			t.Errorf("%d samples, %d heads: %d GEMMs forward and %d backward, want 4 and 8", c.n, c.heads, fwd.GEMMs, bwd.GEMMs)
		}
	}
}

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
	c := stepCounts(t, emulatedDevice(t), "mmt", "fp32", mbs)
	t.Logf("mmt-small, one step of %d micro-batches: %+v", mbs, c)
	if most := int64(params + mbs*(g.NumOps()-1)); c.Memsets > most {
		t.Errorf("%d memsets in a step: more than %d parameter gradients and %d op outputs' gradients in each of %d micro-batches",
			c.Memsets, params, g.NumOps()-1, mbs)
	}
}

// TestForwardsZeroNothingEmulated: no op's forward zeroes memory: each
// output is written in full by its kernels or by GEMMs with beta 0.
func TestForwardsZeroNothingEmulated(t *testing.T) {
	dev := emulatedDevice(t)
	for _, c := range gpuCases() {
		g, i := oneOp(t, c)
		var devErr error
		k, err := newGPUKernel(g, i, dev, nil, &devErr, opCtx())
		if err != nil {
			t.Fatal(err)
		}
		x64, p64 := randomValues(g, i, 3, rand.New(rand.NewSource(11)))
		positive(c, x64)
		before := dev.Counts()
		if _, _, err := k.forward(narrow(x64), narrow(p64)); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if n := dev.Counts().Sub(before).Memsets; n != 0 {
			t.Errorf("%s: the forward zeroed %d buffers", c.name, n)
		}
	}
}
