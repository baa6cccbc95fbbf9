package dag

// Param is one trainable parameter (or buffer) of an op, in PyTorch's layout.
type Param struct {
	Name  string // the slot, the spec's name: "weight", "out_proj.bias", "running_mean"
	Shape Shape
	// Key is its name in the model: the op's params entry for the slot, or
	// "<op>.<slot>". Init files, checkpoints, dumps and exports use it.
	Key string
}

// Cost is what one op costs per sample. FLOPs count a multiply-add as two.
// Backward is split into the gradient for the op's inputs (on the critical path
// of a pipeline) and the gradient for its weights (deferrable, zero-bubble's W).
type Cost struct {
	FwdFLOPs       float64
	BwdInputFLOPs  float64
	BwdWeightFLOPs float64
	Params         int64 // trainable numbers (for opaque, the declared count)
	Buffers        int64 // numbers of state kept beside the parameters (batch_norm's statistics)
	OutBytes       int64 // the output tensor
	StashBytes     int64 // kept from forward until backward
	MemBytes       int64 // read and written by forward: inputs, output, parameters
	// ScoreFLOPs is, of FwdFLOPs, attention's scores and their mixing
	// (q·kᵀ and P·v over every head), and ScoreBytes, of StashBytes, its
	// probabilities: what a fused attention computes in registers (its
	// backward making them again) and keeps none of. 0 for other ops.
	ScoreFLOPs float64
	ScoreBytes int64
}

// BwdFLOPs is the whole backward: input and weight gradients.
func (c Cost) BwdFLOPs() float64 { return c.BwdInputFLOPs + c.BwdWeightFLOPs }

// params lists the parameters and the buffers of an op whose inputs have
// the given shapes, each named.
func params(op *Op, in []*Tensor) (ps, bufs []Param) {
	ps, bufs = slots(op, in)
	for _, list := range [][]Param{ps, bufs} {
		for i := range list {
			list[i].Key = op.Name + "." + list[i].Name
			if k, ok := op.ParamNames[list[i].Name]; ok {
				list[i].Key = k
			}
		}
	}
	return ps, bufs
}

// slots lists the parameters and buffers of an op, unnamed.
func slots(op *Op, in []*Tensor) (ps, bufs []Param) {
	if sl := kinds[op.Kind].slots; sl != nil {
		return sl(&op.Attrs, in)
	}
	return nil, nil
}

// cost computes an op's per-sample cost; ok is false if a size overflows int64.
func cost(op *Op, in []*Tensor, out *Tensor, ps, bufs []Param) (Cost, bool) {
	var s sizer
	var c Cost
	for _, p := range ps {
		c.Params = s.add(c.Params, s.mul(p.Shape...))
	}
	for _, p := range bufs {
		c.Buffers = s.add(c.Buffers, s.mul(p.Shape...))
	}
	c.OutBytes = s.mul(out.Shape.Elems(), out.DType.Size())
	k := costing{op: op, in: in, c: &c, n: float64(out.Shape.Elems()), s: &s}
	for _, t := range in {
		k.inBytes = s.add(k.inBytes, s.mul(t.Shape.Elems(), t.DType.Size()))
	}
	if len(in) > 0 {
		k.xb = s.mul(in[0].Shape.Elems(), in[0].DType.Size())
	}
	kinds[op.Kind].cost(&k)
	c.MemBytes = s.add(k.inBytes, c.OutBytes, s.mul(c.Params, 4))
	return c, !s.bad
}

// costing is one op's cost as its row's cost function fills it: the FLOPs,
// the stash and, for opaque, the declared parameter count. The constants
// per element of the pointwise ops are rough counts of the arithmetic in a
// straightforward kernel.
type costing struct {
	op      *Op
	in      []*Tensor
	c       *Cost
	n       float64 // the output's elements
	inBytes int64   // every input's bytes
	xb      int64   // input 0's bytes
	s       *sizer
}

// stashInput, stashOutput and stashInputs are what an op keeps from forward
// until backward: input 0, its output or all its inputs.
func stashInput(k *costing) int64  { return k.xb }
func stashOutput(k *costing) int64 { return k.c.OutBytes }
func stashInputs(k *costing) int64 { return k.inBytes }

// perElement costs an elementwise op: fwd and bwd FLOPs per output element,
// and its stash (nil: none).
func perElement(fwd, bwd float64, stash func(k *costing) int64) func(k *costing) {
	return func(k *costing) {
		k.c.FwdFLOPs, k.c.BwdInputFLOPs = fwd*k.n, bwd*k.n
		if stash != nil {
			k.c.StashBytes = stash(k)
		}
	}
}

// perInput costs an op by the elements of its input 0 (reductions, losses).
func perInput(fwd, bwd float64, stash func(k *costing) int64) func(k *costing) {
	return func(k *costing) {
		m := float64(k.in[0].Shape.Elems())
		k.c.FwdFLOPs, k.c.BwdInputFLOPs = fwd*m, bwd*m
		if stash != nil {
			k.c.StashBytes = stash(k)
		}
	}
}

// moves is the cost of an op that only moves memory (concat, flatten,
// reshape, transpose, slice, pad) or makes a constant: no FLOPs, no stash.
func moves(*costing) {}
