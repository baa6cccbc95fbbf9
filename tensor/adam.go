package tensor

import "math"

// AdamStep is one Adam (or AdamW) update of a span of a parameter, in
// torch.optim's single-tensor arithmetic as package stage's optimizer
// documents it, with the step's other passes over the gradient fused in.
// Each element, in float32, in this order:
//
//	gi = g·Scale (when Scale ≠ 1: the clip); g = 0 (when Clear)
//	gi = gi + Coupled·p (when Coupled ≠ 0: Adam's weight decay)
//	p = p·Shrink (when Shrink ≠ 1: AdamW's)
//	m = Beta1·m + (1−Beta1)·gi
//	v = Beta2·v + ((1−Beta2)·gi)·gi
//	p = p − (Step·m) / (√v / SqrtBC2 + Eps)
//
// every operation rounded on its own (no fused multiply-add; √ correctly
// rounded), so the vector kernel and the loop give the same bits, as the
// CUDA backend's kernel does.
type AdamStep struct {
	Scale, Coupled, Shrink float32
	Beta1, Beta2, Eps      float32
	Step, SqrtBC2          float32 // lr / (1 − β1ᵗ), √(1 − β2ᵗ)
	Clear                  bool
}

// Apply updates p, m and v (and clears g, with Clear) from g, all of one
// length: 16 lanes at a time with AVX-512 where the CPU has it, the rest by
// ApplyGo's loop.
func (a *AdamStep) Apply(p, g, m, v []float32) {
	n := len(p)
	g, m, v = g[:n], m[:n], v[:n]
	done := 0
	if hasAVX512 && n >= 16 {
		done = n &^ 15
		adamVec(&p[0], &g[0], &m[0], &v[0], done, a, a.flags())
	}
	a.ApplyGo(p[done:], g[done:], m[done:], v[done:])
}

// flags are adamVec's: which of the optional operations run.
func (a *AdamStep) flags() int {
	f := 0
	if a.Scale != 1 {
		f |= 1
	}
	if a.Clear {
		f |= 2
	}
	if a.Coupled != 0 {
		f |= 4
	}
	if a.Shrink != 1 {
		f |= 8
	}
	return f
}

// ApplyGo is Apply one element at a time: the oracle of the vector kernel.
func (a *AdamStep) ApplyGo(p, g, m, v []float32) {
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	beta1, beta2, eps := a.Beta1, a.Beta2, a.Eps
	for i := range p {
		gi := g[i]
		if a.Scale != 1 {
			gi = float32(gi * a.Scale)
		}
		if a.Clear {
			g[i] = 0
		}
		if a.Coupled != 0 {
			gi += float32(a.Coupled * p[i])
		}
		if a.Shrink != 1 {
			p[i] *= a.Shrink
		}
		m[i] = float32(beta1*m[i]) + float32((1-beta1)*gi)
		v[i] = float32(beta2*v[i]) + float32(float32((1-beta2)*gi)*gi)
		denom := float32(float32(math.Sqrt(float64(v[i])))/a.SqrtBC2) + eps
		p[i] -= float32(a.Step*m[i]) / denom
	}
}
