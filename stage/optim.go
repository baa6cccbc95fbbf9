package stage

import (
	"fmt"
	"math"
	"sort"

	"github.com/graphpipe/graphpipe/tensor"
)

// Optimizer updates parameters from their accumulated gradients, once per
// iteration, in the order and arithmetic of PyTorch's implementation
// (torch.optim, 1.13's single-tensor loops).
type Optimizer interface {
	// Step updates params from grads at learning rate lr: the schedule's
	// rate for the step (TrainOptions.Rate), a function of the step alone.
	Step(params, grads map[string]*Value[float32], lr float64)
}

func sortedKeys(m map[string]*Value[float32]) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// decay is the parameter's weight decay: none where only matrices decay
// and it has fewer than 2 dimensions (a bias, a normalisation's scale or
// shift).
func decay(wd float64, matricesOnly bool, p *Value[float32]) float64 {
	if matricesOnly && len(p.Shape) < 2 {
		return 0
	}
	return wd
}

// SGD is torch.optim.SGD (dampening 0): with weight decay λ, d = g + λ·p;
// with momentum μ, buf = d on the first step and buf = μ·buf + d after, and
// d = buf, or d + μ·buf with Nesterov; p −= lr·d.
type SGD struct {
	Momentum    float32
	WeightDecay float64
	Nesterov    bool
	// MatricesOnly exempts parameters of fewer than 2 dimensions from
	// weight decay.
	MatricesOnly bool
	buf          map[string][]float32
}

func (o *SGD) Step(params, grads map[string]*Value[float32], lr float64) {
	o.step(params, grads, lr, 1, false)
}

// step is Step with the step's other passes over the gradients fused in
// (fusedOptimizer): each gradient read times scale (the clip's
// coefficient, rounded as ScaleGrads rounds it) and, with clear, zeroed
// once read. Every element's arithmetic is Step's, in Step's order.
func (o *SGD) step(params, grads map[string]*Value[float32], lr float64, scale float32, clear bool) {
	rate := float32(lr)
	names := sortedKeys(params)
	sizes, loops := make([]int, len(names)), make([]func(lo, hi int), len(names))
	for k, name := range names {
		p, g := params[name].Data, grads[name].Data
		wd := float32(decay(o.WeightDecay, o.MatricesOnly, params[name])) // PyTorch's alpha, cast to the tensor's type
		sizes[k] = len(p)
		if o.Momentum == 0 {
			loops[k] = func(lo, hi int) {
				for i := lo; i < hi; i++ {
					d := g[i]
					if scale != 1 {
						d = float32(d * scale)
					}
					if clear {
						g[i] = 0
					}
					if wd != 0 {
						d += wd * p[i]
					}
					p[i] -= rate * d
				}
			}
			continue
		}
		b, first := o.buf[name], false
		if b == nil {
			b, first = make([]float32, len(g)), true
			o.buf[name] = b
		}
		mu, nesterov := o.Momentum, o.Nesterov
		loops[k] = func(lo, hi int) {
			for i := lo; i < hi; i++ {
				d := g[i]
				if scale != 1 {
					d = float32(d * scale)
				}
				if clear {
					g[i] = 0
				}
				if wd != 0 {
					d += wd * p[i]
				}
				if first {
					b[i] = d
				} else {
					b[i] = mu*b[i] + d
				}
				if nesterov {
					d += mu * b[i]
				} else {
					d = b[i]
				}
				p[i] -= rate * d
			}
		}
	}
	eachPiece(sizes, func(k, lo, hi int) { loops[k](lo, hi) })
}

// Adam is torch.optim.Adam, or torch.optim.AdamW when Decoupled. Adam's
// weight decay λ is added to the gradient (g + λ·p); AdamW's shrinks the
// parameter first (p ·= 1 − lr·λ). Then m = β1·m + (1−β1)·g,
// v = β2·v + (1−β2)·g², p −= (lr / (1−β1ᵗ)) · m / (√v / √(1−β2ᵗ) + eps).
type Adam struct {
	Beta1, Beta2, Eps float32
	WeightDecay       float64
	Decoupled         bool
	// MatricesOnly exempts parameters of fewer than 2 dimensions from
	// weight decay.
	MatricesOnly bool
	t            int
	m, v         map[string][]float32
}

func (o *Adam) Step(params, grads map[string]*Value[float32], lr float64) {
	o.step(params, grads, lr, 1, false)
}

// step is Step with the step's other passes over the gradients fused in,
// as SGD's step: each element's arithmetic is tensor.AdamStep's (16 lanes
// at a time where the CPU has AVX-512, the same bits as its loop).
func (o *Adam) step(params, grads map[string]*Value[float32], lr float64, scale float32, clear bool) {
	o.t++
	bc1 := 1 - math.Pow(float64(o.Beta1), float64(o.t))
	bc2 := 1 - math.Pow(float64(o.Beta2), float64(o.t))
	step := float32(lr / bc1)
	sqrtBC2 := float32(math.Sqrt(bc2))
	beta1, beta2, eps := o.Beta1, o.Beta2, o.Eps
	names := sortedKeys(params)
	sizes, loops := make([]int, len(names)), make([]func(lo, hi int), len(names))
	for k, name := range names {
		p, g := params[name].Data, grads[name].Data
		m, ok := o.m[name]
		if !ok {
			m, o.v[name] = make([]float32, len(p)), make([]float32, len(p))
			o.m[name] = m
		}
		v := o.v[name]
		wd := decay(o.WeightDecay, o.MatricesOnly, params[name])
		var coupled, shrink float32 = 0, 1
		if o.Decoupled {
			shrink = float32(1 - lr*wd)
		} else {
			coupled = float32(wd)
		}
		sizes[k] = len(p)
		a := &tensor.AdamStep{Scale: scale, Coupled: coupled, Shrink: shrink, Beta1: beta1, Beta2: beta2, Eps: eps,
			Step: step, SqrtBC2: sqrtBC2, Clear: clear}
		loops[k] = func(lo, hi int) { a.Apply(p[lo:hi], g[lo:hi], m[lo:hi], v[lo:hi]) }
	}
	eachPiece(sizes, func(k, lo, hi int) { loops[k](lo, hi) })
}

// fusedOptimizer is an optimizer whose update also scales the gradients it
// reads and clears them (the CPU backend's one pass over the state: see
// step_host.go). SGD and Adam are.
type fusedOptimizer interface {
	step(params, grads map[string]*Value[float32], lr float64, scale float32, clear bool)
}

// Stateful optimizers export and load their state, keyed by parameter name,
// so that a checkpoint made under one plan loads under another.
type Stateful interface {
	// State is every state tensor as "<param>.<slot>" (PyTorch's slot names)
	// and the step count.
	State() (map[string][]float32, int)
	// LoadState restores what State returned for the parameters in params.
	LoadState(state map[string][]float32, step int, params map[string]*Value[float32]) error
}

func (o *SGD) State() (map[string][]float32, int) {
	out := map[string][]float32{}
	for name, b := range o.buf {
		out[name+".momentum_buffer"] = append([]float32(nil), b...)
	}
	return out, 0
}

func (o *SGD) LoadState(state map[string][]float32, _ int, params map[string]*Value[float32]) error {
	o.buf = map[string][]float32{}
	for name, p := range params {
		if b, ok := state[name+".momentum_buffer"]; ok {
			if len(b) != len(p.Data) {
				return fmt.Errorf("optimizer state %s.momentum_buffer has %d values, the parameter %d", name, len(b), len(p.Data))
			}
			o.buf[name] = append([]float32(nil), b...)
		}
	}
	return nil
}

func (o *Adam) State() (map[string][]float32, int) {
	out := map[string][]float32{}
	for name := range o.m {
		out[name+".exp_avg"] = append([]float32(nil), o.m[name]...)
		out[name+".exp_avg_sq"] = append([]float32(nil), o.v[name]...)
	}
	return out, o.t
}

func (o *Adam) LoadState(state map[string][]float32, step int, params map[string]*Value[float32]) error {
	o.t, o.m, o.v = step, map[string][]float32{}, map[string][]float32{}
	for name, p := range params {
		m, okM := state[name+".exp_avg"]
		v, okV := state[name+".exp_avg_sq"]
		if !okM && !okV && step == 0 {
			continue
		}
		if !okM || !okV || len(m) != len(p.Data) || len(v) != len(p.Data) {
			return fmt.Errorf("optimizer state for %s is missing or the wrong size", name)
		}
		o.m[name], o.v[name] = append([]float32(nil), m...), append([]float32(nil), v...)
	}
	return nil
}

// stateBytes is what the momentum buffers hold.
func (o *SGD) stateBytes() int64 {
	var n int64
	for _, b := range o.buf {
		n += 4 * int64(len(b))
	}
	return n
}

// stateBytes is what exp_avg and exp_avg_sq hold.
func (o *Adam) stateBytes() int64 {
	var n int64
	for name := range o.m {
		n += 4 * int64(len(o.m[name])+len(o.v[name]))
	}
	return n
}
