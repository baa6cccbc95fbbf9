package stage

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// attentionLayerModel is one attention op (seq tokens of width d, heads
// heads) and one layer norm, after a linear (so that attention's input
// gradient is asked for, as in a model), and a loss to train them by.
func attentionLayerModel(batch, seq, d, heads int) string {
	return fmt.Sprintf(`{"format":"graphpipe/model@2","batch_size":%d,"inputs":[
 {"name":"x","shape":[%d,%d],"dtype":"float32"},{"name":"tgt","shape":[%[2]d,%[3]d],"dtype":"float32"}],"ops":[
 {"name":"in","op":"linear","inputs":["x"],"attrs":{"out":%[3]d}},
 {"name":"attn","op":"attention","inputs":["in"],"attrs":{"heads":%d}},
 {"name":"ln","op":"layer_norm","inputs":["attn"]},
 {"name":"loss","op":"mse","inputs":["ln","tgt"]}]}`, batch, seq, d, heads)
}

// TestAttentionTimesOnGPU times one attention op and one layer norm of the
// paper's MMT (256 tokens of width 1024, 16 heads) at micro-batch 16 on the
// GPU, as `graphpipe profile --model` times ops (each
// op to its end, in the model's three passes: forward, input gradient,
// weight gradient), with attention's softmax in lanes (what a step runs)
// and a thread per row (before), the layer norm once (its row sums have
// been in lanes since before the softmax's), and the softmax kernels alone
// on the layer's 65536 rows of 256 (which it checks agree). It prints
// milliseconds; it fails only where the two softmaxes disagree or a pass
// fails. Meant to take about 10 s on an H100 or H200 (not yet run on one);
// bench/gpu/run.sh runs it with the other OnGPU tests, or alone:
//
//	cd stage && ../build/gpu/stage.test -test.run TestAttentionTimesOnGPU -test.v
func TestAttentionTimesOnGPU(t *testing.T) {
	timeAttentionLayer(t, gpuDevice(t), 16, 256, 1024, 16, time.Second, 20)
}

// TestAttentionTimesEmulated runs TestAttentionTimesOnGPU's code on the
// emulator at a small shape, so that it is known to run where it matters.
func TestAttentionTimesEmulated(t *testing.T) {
	timeAttentionLayer(t, emulatedDevice(t), 2, 40, 16, 2, 0, 1)
}

// timeAttentionLayer times attentionLayerModel's two ops on d at micro-batch
// batch (each variant's passes repeated for minTime, at least 3 times),
// and the softmax kernels alone reps times.
func timeAttentionLayer(t *testing.T, d *cuda.Device, batch, seq, width, heads int, minTime time.Duration, reps int) {
	g, err := dag.Load([]byte(attentionLayerModel(batch, seq, width, heads)))
	if err != nil {
		t.Fatal(err)
	}
	ex, err := NewExecutor(g, allOps(g), g.Seed(), DeviceBackend(d))
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	ex.SyncOps = true
	data, err := NewDataset(g)
	if err != nil {
		t.Fatal(err)
	}
	feeds, err := data.Batch(0, batch)
	if err != nil {
		t.Fatal(err)
	}
	ai, _ := g.OpIndex("attn")
	attn := ex.kernels[ai].(*gpuKernel)
	lanesF, lanesB := attn.fwd, attn.bwd
	rowsF, rowsB := attentionWith(attentionKernel[float32](newOpArgs(g, ai, &ex.ctx)), softmaxRows)
	ms := func(s float64) float64 { return 1e3 * s }
	for _, v := range []struct {
		name     string
		fwd      fwdFn
		bwd      bwdFn
		withNorm bool
	}{{"lanes", lanesF, lanesB, true}, {"rows (before)", rowsF, rowsB, false}, {"lanes, again", lanesF, lanesB, false}} {
		attn.fwd, attn.bwd = v.fwd, v.bwd
		times, err := timePasses(ex, g, feeds, minTime)
		if err != nil {
			t.Fatal(err)
		}
		a := times["attn"]
		t.Logf("attention, softmax in %s: forward %.3f ms, input gradient %.3f, weight gradient %.3f (%d repetitions)",
			v.name, ms(meanOf(a[0])), ms(meanOf(a[1])), ms(meanOf(a[2])), len(a[0]))
		if v.withNorm {
			l := times["ln"]
			t.Logf("layer_norm: forward %.3f ms, input gradient %.3f, weight gradient %.3f", ms(meanOf(l[0])), ms(meanOf(l[1])), ms(meanOf(l[2])))
		}
	}
	timeSoftmaxKernels(t, d, batch*heads*seq, seq, reps)
}

// timeSoftmaxKernels times softmaxLanes and softmaxRows alone on rows ×
// cols scores on d, forward and backward (in gy's place, as attention
// runs it), and fails where their results differ.
func timeSoftmaxKernels(t *testing.T, d *cuda.Device, rows, cols, reps int) {
	n := rows * cols
	r := rand.New(rand.NewSource(1))
	x, gy, gx0 := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], gy[i] = float32(8*r.NormFloat64()), float32(r.NormFloat64())
	}
	const scale = 0.125
	yw, _, gw := runSoftmax(t, d, softmaxRows, x, gy, gx0, rows, cols, scale, 0)
	yg, _, gg := runSoftmax(t, d, softmaxLanes, x, gy, gx0, rows, cols, scale, 0)
	for i := range yw {
		if math.Abs(float64(yg[i]-yw[i])) > 2e-6*math.Abs(float64(yw[i])) || math.Abs(float64(gg[i]-gw[i])) > 1e-5*(1+math.Abs(float64(gw[i]))) {
			t.Fatalf("element %d: lanes y %g, gx %g; rows y %g, gx %g", i, yg[i], gg[i], yw[i], gw[i])
		}
	}
	for _, v := range []struct {
		name string
		sm   softmaxKernels
	}{{"rows (before)", softmaxRows}, {"lanes", softmaxLanes}} {
		var fwd, bwd time.Duration
		err := onDevice(d, nil, func(s *gpuScope) {
			xb, gb := s.up(x), s.up(gy)
			s.fail(d.Sync())
			t0 := time.Now()
			for range reps {
				v.sm.fwd(s, xb, xb, rows, cols, scale, 0)
			}
			s.fail(d.Sync())
			t1 := time.Now()
			for range reps {
				v.sm.bwd(s, xb, gb, gb, rows, cols, scale, 0)
			}
			s.fail(d.Sync())
			fwd, bwd = t1.Sub(t0), time.Since(t1)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("softmax of %d rows of %d in %s: forward %.3f ms, backward %.3f ms (mean of %d)",
			rows, cols, v.name, 1e3*fwd.Seconds()/float64(reps), 1e3*bwd.Seconds()/float64(reps), reps)
	}
}
