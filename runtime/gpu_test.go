package runtime

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// TestWorkersShareAnEmulatedDevice: every in-process worker of a 4-device
// plan computes on one device of the CUDA code path (its CPU emulator),
// taking turns op by op, over a faulty transport; the parameters equal the
// single-process CPU run's within 1e-4.
func TestWorkersShareAnEmulatedDevice(t *testing.T) {
	lib, err := cuda.EmulatorLibrary()
	if errors.Is(err, cuda.ErrNoCompiler) {
		t.Skipf("the CUDA kernels' CPU emulator needs a C++ compiler: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	for _, model := range []string{"mmt", "dlrm"} {
		t.Run(model, func(t *testing.T) {
			dev, err := cuda.OpenEmulator(lib)
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			g, plan := smallPlan(t, model, 4, 4)
			// SGD: Adam turns the rounding noise of a zero gradient (the key third of
			// in_proj_bias, which softmax ignores) into ±lr steps on either side.
			o := Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.05, Momentum: 0.9}}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := RunLocal(ctx, &Job{Run: "gpu-emu", Graph: g, Plan: plan, Steps: 3, Options: o, Config: Config{Device: dev}}, wire.NewMemory(5, wire.Faults{Drop: 0.03, Reorder: 0.03}, 1<<20))
			if err != nil {
				t.Fatal(err)
			}
			want, _ := reference(t, g, plan.MicroBatch, 3, o.Train)
			equalParams(t, res.Params, want, 1e-4)
			// what stays on the device: each stage's state (its parameters,
			// their gradients and SGD's momentum, three flat buffers of the
			// parameters' size, and a few small tables) and the bad-index
			// flag; every activation and gradient buffer of a micro-batch went
			// back to the pool
			var params uint64
			for _, v := range res.Params {
				params += uint64(4 * len(v.Data))
			}
			if st := dev.StagingStats(); st.InUse != 0 || st.Reuses == 0 {
				t.Errorf("staging: %d bytes still in use, %d buffers reused; want 0 and some", st.InUse, st.Reuses)
			}
			if used := dev.MemStats(); used.InUse < 3*params || used.InUse > 3*params+64<<10 {
				t.Errorf("%d bytes of device memory in use after the run, want the state's 3 × %d and at most 64 KiB of tables", used.InUse, params)
			}
		})
	}
}
