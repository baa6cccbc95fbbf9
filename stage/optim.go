package stage

import (
	"fmt"
	"math"
	"sort"
)

// Optimizer updates parameters from their accumulated gradients, once per
// iteration, in the order and arithmetic of PyTorch's implementation.
type Optimizer interface {
	Step(params, grads map[string]*Value[float32])
}

// NewOptimizer returns "sgd" (momentum optional) or "adam" (PyTorch's
// defaults: betas 0.9, 0.999, eps 1e-8), without weight decay.
func NewOptimizer(name string, lr, momentum float32) (Optimizer, error) {
	if !(lr > 0) || math.IsInf(float64(lr), 0) {
		return nil, fmt.Errorf("--lr: must be a positive number, got %g", lr)
	}
	switch name {
	case "sgd":
		if momentum < 0 || momentum >= 1 {
			return nil, fmt.Errorf("--momentum: must be in [0, 1), got %g", momentum)
		}
		return &SGD{LR: lr, Momentum: momentum, buf: map[string][]float32{}}, nil
	case "adam":
		return &Adam{LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, m: map[string][]float32{}, v: map[string][]float32{}}, nil
	}
	return nil, fmt.Errorf("--optimizer: unknown optimizer %q (known: sgd, adam)", name)
}

func sortedKeys(m map[string]*Value[float32]) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// SGD is torch.optim.SGD: with momentum μ, buf = g on the first step and
// buf = μ·buf + g after; p −= lr·buf.
type SGD struct {
	LR, Momentum float32
	buf          map[string][]float32
}

func (o *SGD) Step(params, grads map[string]*Value[float32]) {
	for _, name := range sortedKeys(params) {
		p, g := params[name].Data, grads[name].Data
		if o.Momentum == 0 {
			eachSpan(len(p), func(lo, hi int) {
				for i := lo; i < hi; i++ {
					p[i] -= o.LR * g[i]
				}
			})
			continue
		}
		b, first := o.buf[name], false
		if b == nil {
			b, first = make([]float32, len(g)), true
			o.buf[name] = b
		}
		eachSpan(len(p), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				if first {
					b[i] = g[i]
				} else {
					b[i] = o.Momentum*b[i] + g[i]
				}
				p[i] -= o.LR * b[i]
			}
		})
	}
}

// Adam is torch.optim.Adam: m = β1·m + (1−β1)·g, v = β2·v + (1−β2)·g²,
// p −= (lr / (1−β1ᵗ)) · m / (√v / √(1−β2ᵗ) + eps).
type Adam struct {
	LR, Beta1, Beta2, Eps float32
	t                     int
	m, v                  map[string][]float32
}

func (o *Adam) Step(params, grads map[string]*Value[float32]) {
	o.t++
	bc1 := 1 - math.Pow(float64(o.Beta1), float64(o.t))
	bc2 := 1 - math.Pow(float64(o.Beta2), float64(o.t))
	step := float32(float64(o.LR) / bc1)
	sqrtBC2 := float32(math.Sqrt(bc2))
	for _, name := range sortedKeys(params) {
		p, g := params[name].Data, grads[name].Data
		m, ok := o.m[name]
		if !ok {
			m, o.v[name] = make([]float32, len(p)), make([]float32, len(p))
			o.m[name] = m
		}
		v := o.v[name]
		eachSpan(len(p), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				m[i] = o.Beta1*m[i] + (1-o.Beta1)*g[i]
				v[i] = o.Beta2*v[i] + (1-o.Beta2)*g[i]*g[i]
				denom := float32(math.Sqrt(float64(v[i])))/sqrtBC2 + o.Eps
				p[i] -= step * m[i] / denom
			}
		})
	}
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
