package stage

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"runtime"
	"testing"

	"github.com/graphpipe/graphpipe/stage/internal/kernel"
)

// optimGolden is testdata/torch/optim_golden.json, written by
// gen_optim.py with PyTorch 1.13.
type optimGolden struct {
	Torch     string `json:"torch"`
	Schedules []struct {
		Kind          string
		Warmup, Steps int
		Base          float64
		LRs           []float64 `json:"lrs"`
		Builtin       []float64
	} `json:"schedules"`
	Optimizers []struct {
		Name, Optimizer string
		LR, Momentum    float64
		Nesterov        bool
		WeightDecay     float64 `json:"weight_decay"`
		NoDecay         bool    `json:"no_decay_bias_norm"`
		Schedule        string
		Warmup, Steps   int
		Clip            float64
		Init            map[string][]float32
		Shapes          map[string][]int
		Grads           []map[string][]float32
		LRs             []float64 `json:"lrs"`
		Norms           []float64
		Params          []map[string][]float32
	} `json:"optimizers"`
}

func readOptimGolden(t *testing.T) optimGolden {
	t.Helper()
	b, err := os.ReadFile("testdata/torch/optim_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g optimGolden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Schedules) == 0 || len(g.Optimizers) == 0 {
		t.Fatal("optim_golden.json holds no cases")
	}
	return g
}

// TestSchedulesMatchPyTorch: each schedule's rate at every step equals what
// the optimizer holds under PyTorch's LambdaLR with our factors, and,
// without warm-up, what PyTorch's own LinearLR and CosineAnnealingLR give.
func TestSchedulesMatchPyTorch(t *testing.T) {
	for _, c := range readOptimGolden(t).Schedules {
		t.Run(c.Kind, func(t *testing.T) {
			s := Schedule{Kind: c.Kind, Warmup: c.Warmup, Steps: c.Steps}
			for k, want := range c.LRs {
				if got := c.Base * s.Factor(k); math.Abs(got-want) > 1e-15 {
					t.Errorf("warmup %d steps %d: step %d rate %.17g, LambdaLR %.17g", c.Warmup, c.Steps, k, got, want)
				}
			}
			for k, want := range c.Builtin[:min(len(c.Builtin), c.Steps+1)] {
				if got := c.Base * s.Factor(k); math.Abs(got-want) > 1e-12 {
					t.Errorf("steps %d: step %d rate %.17g, PyTorch's own scheduler %.17g", c.Steps, k, got, want)
				}
			}
		})
	}
}

// TestOptimizersMatchPyTorch: SGD (weight decay, momentum, Nesterov), Adam
// (L2 weight decay) and AdamW, with and without biases and norm weights
// exempt from decay, under schedules and clip_grad_norm_, six steps of
// fixed gradients: the parameters of PyTorch after every step (within
// float32 rounding), the rates, and the norms clip_grad_norm_ returned.
func TestOptimizersMatchPyTorch(t *testing.T) {
	for _, c := range readOptimGolden(t).Optimizers {
		t.Run(c.Name, func(t *testing.T) {
			o := TrainOptions{Optimizer: c.Optimizer, LR: c.LR, Momentum: float32(c.Momentum), Nesterov: c.Nesterov,
				WeightDecay: c.WeightDecay, NoDecayBiasNorm: c.NoDecay, Schedule: c.Schedule, WarmupSteps: c.Warmup,
				Steps: c.Steps, ClipGradNorm: c.Clip}
			opt, err := NewOptimizer(o)
			if err != nil {
				t.Fatal(err)
			}
			params := map[string]*Value[float32]{}
			for name, v := range c.Init {
				params[name] = &Value[float32]{Shape: c.Shapes[name], Data: append([]float32(nil), v...)}
			}
			for k := range c.Params {
				grads := map[string]*Value[float32]{}
				for name, g := range c.Grads[k] {
					grads[name] = &Value[float32]{Shape: c.Shapes[name], Data: append([]float32(nil), g...)}
				}
				if lr := o.Rate(k); math.Abs(lr-c.LRs[k]) > 1e-15*c.LR {
					t.Fatalf("step %d: rate %.9g, PyTorch %.9g", k, lr, c.LRs[k])
				}
				if c.Clip > 0 {
					norm := GlobalNorm(SquaredNorms(grads))
					if math.Abs(norm-c.Norms[k]) > 1e-6*c.Norms[k] {
						t.Fatalf("step %d: global norm %.9g, clip_grad_norm_ %.9g", k, norm, c.Norms[k])
					}
					ScaleGrads(grads, ClipCoef(c.Clip, norm))
				}
				opt.Step(params, grads, o.Rate(k))
				for name, want := range c.Params[k] {
					if d := relDiff(params[name].Data, want); d > 2e-6 {
						t.Fatalf("step %d: %s differs from PyTorch by %.3g of its largest value\n got %v\nwant %v", k, name, d, params[name].Data, want)
					}
				}
			}
		})
	}
}

// relDiff is max|a−b| / max|b|.
func relDiff(a, b []float32) float64 {
	worst, scale := 0.0, 1e-30
	for i := range b {
		worst = math.Max(worst, math.Abs(float64(a[i])-float64(b[i])))
		scale = math.Max(scale, math.Abs(float64(b[i])))
	}
	return worst / scale
}

// TestWeightDecayByHand: one step of each optimizer on one number, worked
// out by hand: p = 1, g = 0.5, lr = 0.1, λ = 0.2.
func TestWeightDecayByHand(t *testing.T) {
	adamStep := 0.1 * 1 / (1 + 1e-8) // Adam's first step is lr·sign(g), less eps
	for _, c := range []struct {
		o    TrainOptions
		want float64
	}{
		{TrainOptions{Optimizer: "sgd", WeightDecay: 0.2}, 1 - 0.1*(0.5+0.2)},
		{TrainOptions{Optimizer: "sgd", WeightDecay: 0.2, Momentum: 0.9, Nesterov: true}, 1 - 0.1*(0.7+0.9*0.7)},
		{TrainOptions{Optimizer: "adam", WeightDecay: 0.2}, 1 - adamStep},
		{TrainOptions{Optimizer: "adamw", WeightDecay: 0.2}, (1 - 0.1*0.2) - adamStep},
		{TrainOptions{Optimizer: "adamw", WeightDecay: 0.2, NoDecayBiasNorm: true}, 1 - adamStep}, // a 1-d parameter
	} {
		c.o.LR = 0.1
		opt, err := NewOptimizer(c.o)
		if err != nil {
			t.Fatal(err)
		}
		p := map[string]*Value[float32]{"b": {Shape: []int{1}, Data: []float32{1}}}
		opt.Step(p, map[string]*Value[float32]{"b": {Shape: []int{1}, Data: []float32{0.5}}}, 0.1)
		if got := float64(p["b"].Data[0]); math.Abs(got-c.want) > 1e-7 {
			t.Errorf("%+v: p = %.9g, want %.9g", c.o, got, c.want)
		}
	}
}

// TestSquaredNormsAreCoreIndependent: a gradient's squared norm is the
// same number on 1 core and on 4 (the blocks are fixed), and it is Σg².
func TestSquaredNormsAreCoreIndependent(t *testing.T) {
	x := make([]float32, 5*normBlock+17+4*kernel.MinSpan)
	naive := 0.0
	for i := range x {
		x[i] = float32(math.Sin(float64(i)*0.37)) * 3
		naive += float64(x[i]) * float64(x[i])
	}
	grads := map[string]*Value[float32]{"w": {Shape: []int{len(x)}, Data: x}}
	var got [2]float64
	for i, cores := range []int{1, 4} {
		prev := runtime.GOMAXPROCS(cores)
		got[i] = SquaredNorms(grads)["w"]
		runtime.GOMAXPROCS(prev)
	}
	if got[0] != got[1] {
		t.Errorf("1 core %.17g, 4 cores %.17g", got[0], got[1])
	}
	if math.Abs(got[0]-naive) > 1e-12*naive {
		t.Errorf("%.17g, Σg² %.17g", got[0], naive)
	}
	if n := GlobalNorm(map[string]float64{"a": 9, "b": 16}); n != 5 {
		t.Errorf("global norm of 3 and 4: %v", n)
	}
}

// TestTrainOptionsRefusals: options no optimizer can use are refused,
// naming their flag.
func TestTrainOptionsRefusals(t *testing.T) {
	for _, c := range []struct {
		o    TrainOptions
		flag string
	}{
		{TrainOptions{Optimizer: "lamb", LR: 1}, "optimizer"},
		{TrainOptions{Optimizer: "adam"}, "lr"},
		{TrainOptions{Optimizer: "adam", LR: math.Inf(1)}, "lr"},
		{TrainOptions{Optimizer: "adamw", LR: 1, WeightDecay: -1}, "weight-decay"},
		{TrainOptions{Optimizer: "adamw", LR: 1, Momentum: 0.9}, "momentum"},
		{TrainOptions{Optimizer: "sgd", LR: 1, Momentum: 1}, "momentum"},
		{TrainOptions{Optimizer: "sgd", LR: 1, Nesterov: true}, "nesterov"},
		{TrainOptions{Optimizer: "sgd", LR: 1, ClipGradNorm: -1}, "clip-grad-norm"},
		{TrainOptions{Optimizer: "sgd", LR: 1, ClipGradNorm: math.NaN()}, "clip-grad-norm"},
		{TrainOptions{Optimizer: "sgd", LR: 1, Schedule: "step"}, "lr-schedule"},
		{TrainOptions{Optimizer: "sgd", LR: 1, WarmupSteps: -2}, "warmup-steps"},
		{TrainOptions{Optimizer: "sgd", LR: 1, Schedule: "cosine"}, "steps"},
	} {
		_, err := NewOptimizer(c.o)
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Flag != c.flag {
			t.Errorf("%+v: %v, want an error naming --%s", c.o, err, c.flag)
		}
	}
	for _, o := range []TrainOptions{{Optimizer: "sgd", LR: 1, Momentum: 0.9, Nesterov: true, WeightDecay: 1e-4, Schedule: "cosine", Steps: 3, WarmupSteps: 5, ClipGradNorm: 1}} {
		if _, err := NewOptimizer(o); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

// TestStateBytes: the catalogue's optimizer state per parameter element.
func TestStateBytes(t *testing.T) {
	for _, c := range []struct {
		o    TrainOptions
		want int64
	}{
		{TrainOptions{Optimizer: "sgd"}, 0},
		{TrainOptions{Optimizer: "sgd", Momentum: 0.9}, 4},
		{TrainOptions{Optimizer: "adam"}, 8},
		{TrainOptions{Optimizer: "adamw"}, 8},
	} {
		if got, err := StateBytes(c.o); err != nil || got != c.want {
			t.Errorf("%+v: %d bytes (%v), want %d", c.o, got, err, c.want)
		}
	}
}
