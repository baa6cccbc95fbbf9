package stage

import (
	"math"
	"math/rand"
	"testing"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/stage/internal/kernel"
	"github.com/graphpipe/graphpipe/tensor/cuda"
	"github.com/graphpipe/graphpipe/tensor/cuda/cudatest"
)

// setGrads writes grads (by parameter name) as the accumulated gradients:
// the host's Grads on the CPU, the flat gradients on the device.
func setGrads(t *testing.T, ex *Executor, grads map[string][]float32) {
	t.Helper()
	for name, g := range grads {
		copy(ex.Grads[name].Data, g)
	}
	cb, ok := ex.be.(*cudaBackend)
	if !ok {
		return
	}
	if err := cb.run(func(s *kernel.Scope, tr *devTrain) {
		for k, name := range tr.pl.names {
			s.Write(tr.pl.view(tr.g, k), grads[name])
		}
	}); err != nil {
		t.Fatal(err)
	}
}

// optimizerCases are the optimizer catalogue's forms: SGD plain, with weight
// decay, momentum, Nesterov and --no-decay-bias-norm; Adam with and
// without L2; AdamW, with --no-decay-bias-norm and a cosine schedule.
var optimizerCases = []TrainOptions{
	{Optimizer: "sgd", LR: 0.1},
	{Optimizer: "sgd", LR: 0.1, WeightDecay: 1e-2},
	{Optimizer: "sgd", LR: 0.1, Momentum: 0.9, WeightDecay: 1e-2},
	{Optimizer: "sgd", LR: 0.1, Momentum: 0.9, Nesterov: true, WeightDecay: 1e-2, NoDecayBiasNorm: true},
	{Optimizer: "adam", LR: 1e-2},
	{Optimizer: "adam", LR: 1e-2, WeightDecay: 1e-2},
	{Optimizer: "adamw", LR: 1e-2, WeightDecay: 1e-2},
	{Optimizer: "adamw", LR: 1e-2, WeightDecay: 1e-1, NoDecayBiasNorm: true, Schedule: "cosine", WarmupSteps: 1, Steps: 4},
}

// TestDeviceOptimizersEmulated: the optimizers on the device (kernels.cu's
// gp_sgd_step, gp_adam_step) compute the host's (optim.go) bit for bit,
// step after step from the same gradients, and keep the same state: the
// optimizer adds no difference between the backends.
func TestDeviceOptimizersEmulated(t *testing.T) { checkDeviceOptimizers(t, cudatest.Emulator(t)) }

// TestDeviceOptimizersOnGPU is TestDeviceOptimizersEmulated on a GPU
// (skipped without one): the same bits, no operation fused.
func TestDeviceOptimizersOnGPU(t *testing.T) { checkDeviceOptimizers(t, cudatest.GPU(t)) }

func checkDeviceOptimizers(t *testing.T, d *cuda.Device) {
	g := small(t, "mlp")
	for _, o := range optimizerCases {
		host, err := NewExecutor(g, allOps(g), 1)
		if err != nil {
			t.Fatal(err)
		}
		dev, err := NewExecutor(g, allOps(g), 1, CUDA(d))
		if err != nil {
			t.Fatal(err)
		}
		for _, ex := range []*Executor{host, dev} {
			if err := ex.SetOptimizer(o); err != nil {
				t.Fatal(err)
			}
		}
		r := rand.New(rand.NewSource(5))
		for step := 0; step < 4; step++ {
			grads := map[string][]float32{}
			for name, p := range host.Params {
				gr := make([]float32, len(p.Data))
				for i := range gr {
					gr[i] = float32(r.NormFloat64()) * float32(math.Pow(10, float64(r.Intn(7)-3)))
				}
				grads[name] = gr
			}
			for _, ex := range []*Executor{host, dev} {
				setGrads(t, ex, grads)
				if err := ex.be.update(o.Rate(step)); err != nil {
					t.Fatal(err)
				}
			}
		}
		for name, want := range host.State() {
			got := hostState(t, dev)[name].Data
			for i := range want.Data {
				if math.Float32bits(got[i]) != math.Float32bits(want.Data[i]) {
					t.Fatalf("%+v: %s[%d] = %v on the device, %v on the host", o, name, i, got[i], want.Data[i])
				}
			}
		}
		hs, hn, _ := host.OptimizerState()
		ds, dn, err := dev.OptimizerState()
		if err != nil || hn != dn || len(hs) != len(ds) {
			t.Fatalf("%+v: the device's optimizer state: step %d, %d tensors (%v); the host's step %d, %d", o, dn, len(ds), err, hn, len(hs))
		}
		for slot, want := range hs {
			for i := range want {
				if math.Float32bits(ds[slot][i]) != math.Float32bits(want[i]) {
					t.Fatalf("%+v: %s[%d] = %v on the device, %v on the host", o, slot, i, ds[slot][i], want[i])
				}
			}
		}
		dev.Close()
	}
}

// TestDeviceNormsEmulated: the squared norms the device reduces (float64
// blocks of normBlock in order) are SquaredNorms's numbers exactly, for
// gradients of more than one block; a NaN or an infinity anywhere makes
// its parameter's not finite, which is the finite check.
func TestDeviceNormsEmulated(t *testing.T) {
	d := cudatest.Emulator(t)
	e, _ := models.Lookup("mmt")
	c := e.Small
	c.Hidden, c.FFN = 64, 512 // feed-forward weights of 32768 elements: two blocks
	g, err := e.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := NewExecutor(g, allOps(g), 1, CUDA(d))
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	if err := ex.SetOptimizer(TrainOptions{Optimizer: "sgd", LR: 0.1}); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewSource(9))
	grads, host := map[string][]float32{}, map[string]*Value[float32]{}
	for name, p := range ex.Params {
		gr := make([]float32, len(p.Data))
		for i := range gr {
			gr[i] = float32(r.NormFloat64() * 1e3)
		}
		grads[name], host[name] = gr, &Value[float32]{Data: gr}
	}
	big := 0
	for _, gr := range grads {
		big = max(big, len(gr))
	}
	if big <= normBlock {
		t.Fatalf("no gradient spans more than one block of %d", normBlock)
	}
	setGrads(t, ex, grads)
	got, err := ex.be.squaredNorms()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range SquaredNorms(host) {
		if got[name] != want {
			t.Fatalf("%s: ‖g‖² %v on the device, %v on the host", name, got[name], want)
		}
	}
	if err := ex.be.clearGrads(); err != nil {
		t.Fatal(err)
	}
	last := ex.ParamNames()[len(ex.ParamNames())-1]
	grads[last][len(grads[last])-1] = float32(math.Inf(1))
	setGrads(t, ex, grads)
	if finite, err := ex.be.gradsFinite(); err != nil || finite {
		t.Fatalf("an infinite gradient read as finite (%v)", err)
	}
}

// TestBF16StoresNoRoundingEmulated: in bf16 a step's activations and
// their gradients are bf16 where their producers write them, every product
// reads bf16 operands as they lie (a weight's copy, which the optimizer's
// kernel writes as it writes the weight), and no kernel rounds anything:
// a steady step of mmt small launches no more kernels than in fp32
// (fewer: its attention runs fused), and every product reads a half
// buffer, a weight's being its fresh copy.
func TestBF16StoresNoRoundingEmulated(t *testing.T) {
	d := cudatest.Emulator(t)
	launches := map[string]int64{}
	var products, weights int
	for _, p := range []string{"fp32", "bf16"} {
		g := small(t, "mmt")
		tr, err := NewTrainer(g, TrainOptions{Optimizer: "sgd", LR: 0.05, MicroBatch: int(g.BatchSize()) / 2})
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Ex.UseDevice(d); err != nil {
			t.Fatal(err)
		}
		if err := tr.Ex.SetPrecision(p); err != nil {
			t.Fatal(err)
		}
		for step := 0; step < 2; step++ { // the copies are made at the first step's products
			if _, _, err := tr.Step(step); err != nil {
				t.Fatal(err)
			}
		}
		train := tr.Ex.be.(*cudaBackend).dev.train
		kernel.TestHookGemm = func(_ *cuda.Device, gm cuda.GemmArgs, _, _, _, _ int, prec string) func() {
			if prec == "bf16" {
				products++
				for _, b := range []cuda.Buffer{gm.A, gm.B} {
					if _, ok := train.byPtr[b.Ptr]; ok {
						weights++
						if h := train.halves[train.byPtr[b.Ptr]]; h == nil || !h.fresh {
							t.Errorf("a product reads a weight with no fresh bf16 copy")
						}
					} else if !b.Half {
						t.Errorf("a product reads an activation of float32s")
					}
				}
			}
			return func() {}
		}
		before := d.Counts()
		_, _, err = tr.Step(2)
		kernel.TestHookGemm = nil
		if err != nil {
			t.Fatal(err)
		}
		launches[p] = d.Counts().Sub(before).Launches
		tr.Ex.Close()
	}
	t.Logf("a step of 2 micro-batches: %d launches in fp32, %d in bf16; %d bf16 products, %d of them reading a weight", launches["fp32"], launches["bf16"], products, weights)
	if products == 0 || weights == 0 || launches["bf16"] > launches["fp32"] {
		t.Errorf("bf16 launched %d kernels, fp32 %d: want no more", launches["bf16"], launches["fp32"])
	}
}
