package stage

import (
	"fmt"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor/cuda"
	"github.com/graphpipe/graphpipe/tensor/cuda/cudatest"
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
// GPU, as `graphpipe profile --model` times ops (each op to its end, in the
// model's three passes: forward, input gradient, weight gradient). It
// prints milliseconds; it fails only where a pass fails. The kernel room's
// TestSoftmaxTimesOnGPU times attention's two softmax kernels alone.
// bench/gpu/run.sh runs it with the other OnGPU tests, or alone:
//
//	cd stage && ../build/gpu/stage.test -test.run TestAttentionTimesOnGPU -test.v
func TestAttentionTimesOnGPU(t *testing.T) {
	timeAttentionLayer(t, cudatest.GPU(t), 16, 256, 1024, 16, time.Second)
}

// TestAttentionTimesEmulated runs TestAttentionTimesOnGPU's code on the
// emulator at a small shape, so that it is known to run where it matters.
func TestAttentionTimesEmulated(t *testing.T) {
	timeAttentionLayer(t, cudatest.Emulator(t), 2, 40, 16, 2, 0)
}

// timeAttentionLayer times attentionLayerModel's two ops on d at micro-batch
// batch (their passes repeated for minTime, at least 3 times).
func timeAttentionLayer(t *testing.T, d *cuda.Device, batch, seq, width, heads int, minTime time.Duration) {
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
	times, err := timePasses(ex, g, feeds, minTime)
	if err != nil {
		t.Fatal(err)
	}
	ms := func(s float64) float64 { return 1e3 * s }
	for _, op := range []string{"attn", "ln"} {
		a := times[op]
		t.Logf("%s: forward %.3f ms, input gradient %.3f, weight gradient %.3f (%d repetitions)",
			op, ms(meanOf(a[0])), ms(meanOf(a[1])), ms(meanOf(a[2])), len(a[0]))
	}
}
