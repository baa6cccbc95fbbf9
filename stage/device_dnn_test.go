package stage

import (
	"fmt"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/stage/internal/kernel"
	"github.com/graphpipe/graphpipe/tensor/cuda"
	"github.com/graphpipe/graphpipe/tensor/cuda/cudatest"
)

// TestModelV2TrainsFakeDNNEmulated is TestModelV2TrainsOnEmulator with
// the fake cuDNN: the executor's device-resident path through cuDNN (its
// 3×3 convolution there; the other, padded asymmetrically, on im2col).
func TestModelV2TrainsFakeDNNEmulated(t *testing.T) {
	d := cudatest.FakeDNN(t)
	before := d.Counts()
	checkModelV2Trains(t, d)
	if n := d.Counts().Sub(before).DNN; n == 0 {
		t.Error("no cuDNN call: v2Net's convolutions all ran as im2col")
	}
}

// convLayerModel is two of ResNet-50's convolutions with the batch norm
// between them (layer1's: a 3×3 of 64 channels at 56×56, a 1×1 from 64 to
// 256), at batch batch and width c (64 for ResNet's), and a loss.
func convLayerModel(batch, c, hw int) string {
	return fmt.Sprintf(`{"format":"graphpipe/model@2","batch_size":%d,"inputs":[
 {"name":"x","shape":[%d,%d,%[3]d],"dtype":"float32"},{"name":"tgt","shape":[%d],"dtype":"float32"}],"ops":[
 {"name":"conv3x3","op":"conv2d","inputs":["x"],"attrs":{"out":%[2]d,"kernel":[3,3],"padding":[1,1,1,1],"bias":false}},
 {"name":"bn","op":"batch_norm","inputs":["conv3x3"]},
 {"name":"conv1x1","op":"conv2d","inputs":["bn"],"attrs":{"out":%[4]d,"kernel":[1,1],"bias":false}},
 {"name":"gap","op":"global_avg_pool","inputs":["conv1x1"]},
 {"name":"f","op":"flatten","inputs":["gap"]},
 {"name":"loss","op":"mse","inputs":["f","tgt"]}]}`, batch, c, hw, 4*c)
}

// TestConvTimesOnGPU times one of ResNet-50's 3×3 convolutions and one of
// its 1×1 convolutions (convLayerModel: layer1's, at batch 64) on GPU 0,
// through cuDNN and through im2col + GEMM, in fp32 and tf32, as `graphpipe
// profile --model` times ops (each to its end, in the model's passes:
// forward, input gradient, weight gradient), and the batch norm between
// them (graphpipe's kernels). It prints milliseconds; it fails only on an
// error. The kernel room's TestConvPathsAgreeOnGPU checks that the two
// paths agree at these sizes. Meant to take under 20 s on an H100 or H200;
// bench/gpu/run.sh runs it with the other OnGPU tests, or alone:
//
//	cd stage && ../build/gpu/stage.test -test.run TestConvTimesOnGPU -test.v
func TestConvTimesOnGPU(t *testing.T) {
	timeConvLayers(t, cudatest.DNN(t), 64, 64, 56, 300*time.Millisecond)
}

// TestConvTimesEmulated runs TestConvTimesOnGPU's code on the emulator
// with the fake cuDNN at a small shape, so that it is known to run where
// it matters.
func TestConvTimesEmulated(t *testing.T) {
	timeConvLayers(t, cudatest.FakeDNN(t), 2, 4, 6, 0)
}

// timeConvLayers times convLayerModel's ops on d at batch batch, width c
// and size hw×hw, each variant's passes repeated for minTime (at least 3
// times).
func timeConvLayers(t *testing.T, d *cuda.Device, batch, c, hw int, minTime time.Duration) {
	g, err := dag.Load([]byte(convLayerModel(batch, c, hw)))
	if err != nil {
		t.Fatal(err)
	}
	data, err := NewDataset(g)
	if err != nil {
		t.Fatal(err)
	}
	feeds, err := data.Batch(0, batch)
	if err != nil {
		t.Fatal(err)
	}
	ms := func(s float64) float64 { return 1e3 * s }
	t.Logf("%s, %s; batch %d, %d channels at %d×%d", d.Name, d.ConvPath(), batch, c, hw, hw)
	for _, prec := range []string{"fp32", "tf32"} {
		for _, path := range []string{"cudnn", "im2col"} {
			ex, err := NewExecutor(g, allOps(g), g.Seed(), DeviceBackend(d))
			if err != nil {
				t.Fatal(err)
			}
			ex.SyncOps = true
			if err := ex.SetPrecision(prec); err != nil {
				t.Fatal(err)
			}
			for _, k := range ex.kernels {
				kernel.Im2col(k, path == "im2col")
			}
			before := d.Counts()
			times, err := timePasses(ex, g, feeds, minTime)
			ex.Close()
			if err != nil {
				t.Fatal(err)
			}
			if n := d.Counts().Sub(before).DNN; (n > 0) != (path == "cudnn") {
				t.Errorf("%s, %s: %d cuDNN calls", prec, path, n)
			}
			for _, op := range []string{"conv3x3", "conv1x1", "bn"} { // bn on the im2col path: graphpipe's own kernels
				a := times[op]
				t.Logf("%s %-6s %-8s forward %7.3f ms, input gradient %7.3f, weight gradient %7.3f (%d repetitions)",
					prec, path, op, ms(meanOf(a[0])), ms(meanOf(a[1])), ms(meanOf(a[2])), len(a[0]))
			}
		}
	}
}
