package stage

import (
	"context"
	"math/rand"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/stage/internal/kernel"
	"github.com/graphpipe/graphpipe/tensor/cuda"
	"github.com/graphpipe/graphpipe/tensor/cuda/cudatest"
)

// linkNet is two stages, A (fc1, act) and B (fc2, loss), crossed by "act".
const linkNet = `{"format":"graphpipe/model@1","batch_size":8,
 "inputs":[{"name":"x","shape":[6],"dtype":"float32"},{"name":"y","shape":[3],"dtype":"float32"}],
 "ops":[{"name":"fc1","op":"linear","inputs":["x"],"attrs":{"out":10}},
        {"name":"act","op":"relu","inputs":["fc1"]},
        {"name":"fc2","op":"linear","inputs":["act"],"attrs":{"out":3}},
        {"name":"loss","op":"mse","inputs":["fc2","y"]}]}`

// linkPair is stage A's and stage B's executors, each on its own emulated
// device, with SGD.
func linkPair(t *testing.T, g *dag.Graph) (a, b *Executor, da, db *cuda.Device) {
	t.Helper()
	da, db = cudatest.Emulator(t), cudatest.Emulator(t)
	var err error
	if a, err = NewExecutor(g, []int{0, 1}, 1, CUDA(da)); err != nil {
		t.Fatal(err)
	}
	if b, err = NewExecutor(g, []int{2, 3}, 1, CUDA(db)); err != nil {
		t.Fatal(err)
	}
	for _, e := range []*Executor{a, b} {
		if err := e.SetOptimizer(TrainOptions{Optimizer: "sgd", LR: 0.1, Batch: 8}); err != nil {
			t.Fatal(err)
		}
	}
	return a, b, da, db
}

// TestEmulatedDeviceLinkMatchesHost: two stages on two emulated devices
// that hand "act" forward and its gradient back device to device (kept on
// the device, lent, copied from the peer's memory, adopted, given back)
// step to the parameters of the same stages handing them over through the
// host, bit for bit, and hold no more device memory after the step.
func TestEmulatedDeviceLinkMatchesHost(t *testing.T) {
	g, err := dag.Load([]byte(linkNet))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(3))
	feeds := func(mb int) (*Value[float32], *Value[float32]) {
		x, y := NewValue[float32](4, 6), NewValue[float32](4, 3)
		for i := range x.Data {
			x.Data[i] = float32(rng.NormFloat64())
		}
		for i := range y.Data {
			y.Data[i] = float32(rng.NormFloat64())
		}
		return x, y
	}
	xs, ys := make([]*Value[float32], 2), make([]*Value[float32], 2)
	for mb := range xs {
		xs[mb], ys[mb] = feeds(mb)
	}
	seed := func() map[string]*Value[float32] {
		return map[string]*Value[float32]{"loss": {Shape: []int{1}, Data: []float32{0.5}}}
	}
	hostA, hostB, hda, hdb := linkPair(t, g)
	devA, devB, dda, ddb := linkPair(t, g)
	devA.KeepOnDevice([]string{"act"}, nil)
	devB.KeepOnDevice(nil, []string{"act"})
	// move copies v, lent by from on src, into a buffer of dst that to's
	// micro-batch mb adopts, and gives v back
	move := func(from, to *Executor, src, dst *cuda.Device, mb int, v *Value[float32]) *Value[float32] {
		t.Helper()
		b, ok := from.DeviceBuffer(v)
		if !ok || v.Data != nil {
			t.Fatalf("a value kept on the device is not lent (host data %v)", v.Data != nil)
		}
		h, off, err := src.Export(b)
		if err != nil {
			t.Fatal(err)
		}
		into, _ := dst.Alloc(b.N)
		if err := dst.CopyFromPeer(into, h, off, kernel.SizeOf(v.Shape)); err != nil {
			t.Fatal(err)
		}
		out := &Value[float32]{Shape: v.Shape}
		if err := to.Adopt(mb, out, into); err != nil {
			t.Fatal(err)
		}
		if err := from.Return(v); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for mb := 0; mb < 2; mb++ {
		pos := Position{Step: 0, Sample: 4 * mb}
		ha, err := hostA.Forward(mb, pos, map[string]*Value[float32]{"x": xs[mb]})
		if err != nil {
			t.Fatal(err)
		}
		da, err := devA.Forward(mb, pos, map[string]*Value[float32]{"x": xs[mb]})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := hostB.Forward(mb, pos, map[string]*Value[float32]{"act": ha["act"], "y": ys[mb]}); err != nil {
			t.Fatal(err)
		}
		if _, err := devB.Forward(mb, pos, map[string]*Value[float32]{"act": move(devA, devB, dda, ddb, mb, da["act"]), "y": ys[mb]}); err != nil {
			t.Fatal(err)
		}
		hg, err := hostB.Backward(mb, seed(), true)
		if err != nil {
			t.Fatal(err)
		}
		dg, err := devB.Backward(mb, seed(), true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := hostA.Backward(mb, map[string]*Value[float32]{"act": hg["act"]}, true); err != nil {
			t.Fatal(err)
		}
		if _, err := devA.Backward(mb, map[string]*Value[float32]{"act": move(devB, devA, ddb, dda, mb, dg["act"])}, true); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range []*Executor{hostA, hostB, devA, devB} {
		if _, err := e.EndStep(context.Background(), 0, nil); err != nil {
			t.Fatal(err)
		}
		if err := e.ApplyStep(false); err != nil {
			t.Fatal(err)
		}
	}
	for _, pair := range [][2]*Executor{{hostA, devA}, {hostB, devB}} {
		want, _ := pair[0].HostState()
		got, _ := pair[1].HostState()
		for name, w := range want {
			for i := range w.Data {
				if got[name].Data[i] != w.Data[i] {
					t.Fatalf("%s[%d]: %v by device links, %v through the host", name, i, got[name].Data[i], w.Data[i])
				}
			}
		}
	}
	for _, d := range [][2]*cuda.Device{{hda, dda}, {hdb, ddb}} {
		if h, v := d[0].MemStats().InUse, d[1].MemStats().InUse; h != v {
			t.Errorf("device memory in use after the step: %d bytes with device links, %d through the host", v, h)
		}
	}
}
