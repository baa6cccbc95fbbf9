package kernel

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/graphpipe/graphpipe/tensor/cuda"
	"github.com/graphpipe/graphpipe/tensor/cuda/cudatest"
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
	k, err := NewGPU(g, i, dev, nil, &devErr, opCtx())
	if err != nil {
		t.Fatal(err)
	}
	x64, p64 := randomValues(g, i, n, rand.New(rand.NewSource(3)))
	x, p := narrow(x64), narrow(p64)
	before := dev.Counts()
	y, st, err := k.Forward(x, p)
	if err != nil {
		t.Fatal(err)
	}
	mid := dev.Counts()
	gy := NewValue[float32](y.Shape...)
	k.Backward(gy, x, p, y, st, seeded(x, true), seeded(p, true))
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
	dev := cudatest.Emulator(t)
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

// TestForwardsZeroNothingEmulated: no op's forward zeroes memory: each
// output is written in full by its kernels or by GEMMs with beta 0.
func TestForwardsZeroNothingEmulated(t *testing.T) {
	dev := cudatest.Emulator(t)
	for _, c := range gpuCases() {
		g, i := oneOp(t, c)
		var devErr error
		k, err := NewGPU(g, i, dev, nil, &devErr, opCtx())
		if err != nil {
			t.Fatal(err)
		}
		x64, p64 := randomValues(g, i, 3, rand.New(rand.NewSource(11)))
		positive(c, x64)
		before := dev.Counts()
		if _, _, err := k.Forward(narrow(x64), narrow(p64)); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if n := dev.Counts().Sub(before).Memsets; n != 0 {
			t.Errorf("%s: the forward zeroed %d buffers", c.name, n)
		}
	}
}
