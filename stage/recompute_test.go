package stage

import (
	"math"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor/cuda"
	"github.com/graphpipe/graphpipe/tensor/cuda/cudatest"
)

// stateAfter runs two steps of one batch in mbs micro-batches, every
// forward before any backward (all in flight), on device d (nil: the CPU),
// recomputing or not, with an SGD step between, and returns the parameters,
// buffers and last gradients by name. With recompute it checks that a
// micro-batch in flight keeps only what it was fed.
func stateAfter(t *testing.T, g *dag.Graph, mbs int, recompute bool, d *cuda.Device) map[string][]float32 {
	t.Helper()
	tr, err := NewTrainer(g, TrainOptions{Optimizer: "sgd", LR: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	tr.Ex.Recompute = recompute
	if d != nil {
		if err := tr.Ex.UseDevice(d); err != nil {
			t.Fatal(err)
		}
		defer tr.Ex.Close()
	}
	n := int(g.BatchSize())
	b, loss := n/mbs, g.Op(g.Loss()).Name
	for step := 0; step < 2; step++ {
		batch, err := tr.Data.Batch(step, n)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Ex.ZeroGrads(); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < mbs; j++ {
			feeds := map[string]*Value[float32]{}
			for k, v := range batch {
				feeds[k] = SliceRows(v, j*b, (j+1)*b)
			}
			if _, err := tr.Ex.Forward(j, Position{Step: step, Sample: j * b}, feeds); err != nil {
				t.Fatal(err)
			}
			if m := tr.Ex.mbs[j]; recompute && (len(m.vals) != 0 || len(m.stash) != 0) {
				t.Fatalf("micro-batch %d keeps %d values and %d stashes past its forward", j, len(m.vals), len(m.stash))
			}
		}
		for j := mbs - 1; j >= 0; j-- {
			seed := &Value[float32]{Shape: []int{1}, Data: []float32{float32(b) / float32(n)}}
			if _, err := tr.Ex.Backward(j, map[string]*Value[float32]{loss: seed}, true); err != nil {
				t.Fatal(err)
			}
		}
		if err := tr.Ex.be.fetchGrads(); err != nil {
			t.Fatal(err)
		}
		if step == 0 {
			if _, err := tr.Ex.HostState(); err != nil {
				t.Fatal(err)
			}
			for name, p := range tr.Ex.Params {
				for i, gv := range tr.Ex.Grads[name].Data {
					p.Data[i] -= 0.1 * gv
				}
			}
			tr.Ex.be.changed(nil)
		}
	}
	out := map[string][]float32{}
	state, err := tr.Ex.HostState()
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range state {
		out[name] = append([]float32(nil), v.Data...)
	}
	for name, v := range tr.Ex.Grads {
		out["grad "+name] = append([]float32(nil), v.Data...)
	}
	return out
}

// sameBits fails where two states differ in any bit.
func sameBits(t *testing.T, got, want map[string][]float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d values, want %d", len(got), len(want))
	}
	nonzero := 0
	for name, w := range want {
		for i := range w {
			if math.Float32bits(got[name][i]) != math.Float32bits(w[i]) {
				t.Fatalf("%s[%d]: %v recomputing, %v keeping", name, i, got[name][i], w[i])
			}
			if w[i] != 0 {
				nonzero++
			}
		}
	}
	if nonzero == 0 {
		t.Fatal("every value is zero")
	}
}

// TestRecomputeIsBitIdentical: an executor that recomputes each
// micro-batch's forward in its backward computes the parameters' gradients,
// batch_norm's running statistics (moved once per micro-batch, not twice)
// and dropout's masks of one that keeps its activations, bit for bit.
func TestRecomputeIsBitIdentical(t *testing.T) {
	v2, err := dag.Load([]byte(v2Net))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []*dag.Graph{v2, small(t, "mmt"), small(t, "dlrm")} {
		t.Run(g.Name(), func(t *testing.T) {
			sameBits(t, stateAfter(t, g, 4, true, nil), stateAfter(t, g, 4, false, nil))
		})
	}
}

// TestRecomputeOnEmulator: the same on the CUDA kernels' emulator, where a
// micro-batch's device memory but its fed values' copies and the staged
// outputs is freed after its forward.
func TestRecomputeOnEmulator(t *testing.T) { checkRecompute(t, cudatest.Emulator(t)) }

// TestRecomputeOnGPU is TestRecomputeOnEmulator on a real GPU (skipped without one).
func TestRecomputeOnGPU(t *testing.T) { checkRecompute(t, cudatest.GPU(t)) }

func checkRecompute(t *testing.T, d *cuda.Device) {
	g, err := dag.Load([]byte(v2Net))
	if err != nil {
		t.Fatal(err)
	}
	sameBits(t, stateAfter(t, g, 4, true, d), stateAfter(t, g, 4, false, d))
}
