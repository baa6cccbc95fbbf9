package stage

import (
	"fmt"
	"math"
	"testing"

	"github.com/graphpipe/graphpipe/tensor/cuda"
	"github.com/graphpipe/graphpipe/tensor/cuda/cudatest"
)

// TestParamCacheKeepsParametersFresh: training on the device with 4
// micro-batches a step uploads the parameters once, at the first step, and
// never again (not per step, micro-batch or op call: the optimizer updates
// them there), and still follows the optimizer's updates step by step (=
// the CPU trainer within 1e-4, once HostState brings them down).
func TestParamCacheKeepsParametersFresh(t *testing.T) {
	d := cudatest.Emulator(t)
	g := small(t, "mmt")
	o := TrainOptions{Optimizer: "sgd", LR: 0.05, Momentum: 0.9, MicroBatch: int(g.BatchSize()) / 4}
	cpu, err := NewTrainer(g, o)
	if err != nil {
		t.Fatal(err)
	}
	dev, _ := NewTrainer(g, o)
	paramBytes := int64(0)
	for _, p := range cpu.Ex.Params {
		paramBytes += int64(4 * len(p.Data))
	}
	before := d.Counts()
	if err := dev.Ex.UseDevice(d); err != nil {
		t.Fatal(err)
	}
	const steps = 3
	for s := 0; s < steps; s++ {
		if s > 0 {
			before = d.Counts()
		}
		lc, _, err := cpu.Step(s)
		if err != nil {
			t.Fatal(err)
		}
		ld, _, err := dev.Step(s)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(lc-ld) > 1e-4*math.Abs(lc) {
			t.Fatalf("step %d: loss %v on the device, %v on the CPU", s, ld, lc)
		}
		up := d.Counts().Sub(before).H2DBytes
		if s == 0 && up < paramBytes || s > 0 && up >= paramBytes {
			t.Errorf("step %d uploaded %d bytes; the parameters are %d bytes, to be uploaded at the first step alone", s, up, paramBytes)
		}
	}
	state, err := dev.Ex.HostState()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range cpu.Ex.Params {
		cudatest.Near(t, name, state[name].Data, want.Data, 1e-3)
	}
}

// TestDeviceAccumulation: with values kept on the device, 4 micro-batches
// with the weight gradients taken at once or deferred (W after every B, in
// another order) give the CPU's full-batch gradients; the outputs that stay
// inside the stage never come back to the host (checked in gradsOn).
func TestDeviceAccumulation(t *testing.T) { checkDeviceAccumulation(t, cudatest.Emulator(t)) }

func TestDeviceAccumulationOnGPU(t *testing.T) { checkDeviceAccumulation(t, cudatest.GPU(t)) }

func checkDeviceAccumulation(t *testing.T, d *cuda.Device) {
	for _, name := range []string{"mmt", "dlrm", "candle-uno", "case-study"} {
		t.Run(name, func(t *testing.T) {
			g := small(t, name)
			full := gradsOf(t, g, 1, false)
			for _, v := range []struct {
				mbs   int
				split bool
			}{{4, false}, {4, true}, {1, true}} {
				got := gradsOn(t, g, v.mbs, v.split, d)
				for k, want := range full {
					cudatest.Near(t, fmt.Sprintf("%+v: %s", v, k), got[k], want, 1e-3)
				}
			}
			if used := d.MemStats(); used.InUse > 512 { // the bad-index flag
				t.Errorf("%d bytes of device memory in use after the executors closed", used.InUse)
			}
		})
	}
}

// TestDeviceForwardFailure: a micro-batch that fails on the device (an
// index out of range) reports the op and leaves no device memory behind.
func TestDeviceForwardFailure(t *testing.T) {
	d := cudatest.Emulator(t)
	g := small(t, "dlrm")
	tr, err := NewTrainer(g, TrainOptions{Optimizer: "sgd", LR: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Ex.UseDevice(d); err != nil {
		t.Fatal(err)
	}
	batch, err := tr.Data.Batch(0, int(g.BatchSize()))
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for _, v := range batch {
		if v.Ints != nil {
			v.Ints[0] = 1 << 30
			bad++
		}
	}
	if bad == 0 {
		t.Fatal("dlrm has no index input")
	}
	if _, err := tr.Ex.Forward(0, Position{}, batch); err == nil {
		t.Fatal("an index of 2^30 was accepted")
	}
	if tr.Ex.InFlight() != 0 {
		t.Errorf("%d micro-batches in flight after a failed forward", tr.Ex.InFlight())
	}
	if err := tr.Ex.Close(); err != nil {
		t.Fatal(err)
	}
	if used := d.MemStats(); used.InUse > 512 {
		t.Errorf("%d bytes of device memory in use after the failure and Close", used.InUse)
	}
}
