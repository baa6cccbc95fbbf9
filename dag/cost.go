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
	a := op.Attrs
	switch op.Kind {
	case Linear:
		x := in[0].Shape
		w := Shape{a.Out, x[len(x)-1]}
		if a.WeightLayout == "in_out" {
			w = Shape{x[len(x)-1], a.Out}
		}
		ps := []Param{{Name: "weight", Shape: w}}
		if a.Bias {
			ps = append(ps, Param{Name: "bias", Shape: Shape{a.Out}})
		}
		return ps, nil
	case LayerNorm:
		x := in[0].Shape
		d := x[len(x)-1]
		return []Param{{Name: "weight", Shape: Shape{d}}, {Name: "bias", Shape: Shape{d}}}, nil
	case Embedding, EmbeddingBag:
		return []Param{{Name: "weight", Shape: Shape{a.Num, a.Dim}}}, nil
	case Attention:
		d := in[0].Shape[1]
		return []Param{
			{Name: "in_proj_weight", Shape: Shape{3 * d, d}}, {Name: "in_proj_bias", Shape: Shape{3 * d}},
			{Name: "out_proj.weight", Shape: Shape{d, d}}, {Name: "out_proj.bias", Shape: Shape{d}},
		}, nil
	case Conv2D:
		ps := []Param{{Name: "weight", Shape: Shape{a.Out, in[0].Shape[0] / a.Groups, a.Kernel[0], a.Kernel[1]}}}
		if a.Bias {
			ps = append(ps, Param{Name: "bias", Shape: Shape{a.Out}})
		}
		return ps, nil
	case BatchNorm:
		c := in[0].Shape[0]
		return []Param{{Name: "weight", Shape: Shape{c}}, {Name: "bias", Shape: Shape{c}}},
			[]Param{{Name: "running_mean", Shape: Shape{c}}, {Name: "running_var", Shape: Shape{c}}}
	case Parameter:
		return []Param{{Name: "value", Shape: append(Shape{}, a.Shape...)}}, nil
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
	if op.Kind == Opaque {
		c.Params = op.Attrs.Params
	}
	c.OutBytes = s.mul(out.Shape.Elems(), out.DType.Size())
	inBytes := int64(0)
	for _, t := range in {
		inBytes = s.add(inBytes, s.mul(t.Shape.Elems(), t.DType.Size()))
	}
	c.MemBytes = s.add(inBytes, c.OutBytes, s.mul(c.Params, 4))
	flops(op, in, out, &c, inBytes, &s)
	return c, !s.bad
}

// flops fills the FLOPs and the stash of c. The constants per element for the
// pointwise ops are rough counts of the arithmetic in a straightforward kernel.
func flops(op *Op, in []*Tensor, out *Tensor, c *Cost, inBytes int64, s *sizer) {
	a := op.Attrs
	n := float64(out.Shape.Elems())
	xb := int64(0)
	if len(in) > 0 {
		xb = s.mul(in[0].Shape.Elems(), in[0].DType.Size())
	}
	switch op.Kind {
	case Linear:
		x := in[0].Shape
		k := float64(x[len(x)-1])
		mm := 2 * n * k // n = rows × out
		c.FwdFLOPs, c.BwdInputFLOPs, c.BwdWeightFLOPs = mm, mm, mm
		if a.Bias {
			c.FwdFLOPs += n
			c.BwdWeightFLOPs += n
		}
		c.StashBytes = xb
	case ReLU:
		c.FwdFLOPs, c.BwdInputFLOPs, c.StashBytes = n, n, xb
	case GELU:
		c.FwdFLOPs, c.BwdInputFLOPs, c.StashBytes = 8*n, 12*n, xb
	case Tanh, Sigmoid:
		c.FwdFLOPs, c.BwdInputFLOPs, c.StashBytes = 4*n, 2*n, c.OutBytes
	case LayerNorm:
		x := in[0].Shape
		rows := in[0].Shape.Elems() / x[len(x)-1]
		c.FwdFLOPs, c.BwdInputFLOPs, c.BwdWeightFLOPs = 8*n, 10*n, 2*n
		c.StashBytes = s.add(xb, s.mul(rows, 2, 4)) // x, mean and 1/std per row
	case Add:
		c.FwdFLOPs = float64(len(in)-1) * n
	case Mul:
		c.FwdFLOPs, c.BwdInputFLOPs, c.StashBytes = n, 2*n, inBytes
	case Mean:
		m := float64(in[0].Shape.Elems())
		c.FwdFLOPs, c.BwdInputFLOPs = m, m
	case Embedding, EmbeddingBag:
		// a gather forward, a scatter-add into the weight gradient backward
		k := float64(in[0].Shape.Elems())
		c.FwdFLOPs, c.BwdWeightFLOPs = k*float64(a.Dim), k*float64(a.Dim)
		c.StashBytes = xb
	case Attention:
		attention(in[0].Shape, a.Heads, c, s)
	case DotInteraction:
		pairs, d := n, float64(in[0].Shape[0])
		c.FwdFLOPs, c.BwdInputFLOPs, c.StashBytes = 2*pairs*d, 4*pairs*d, inBytes
	case SoftmaxCrossEntropy:
		k := float64(in[0].Shape.Elems())
		c.FwdFLOPs, c.BwdInputFLOPs, c.StashBytes = 5*k, 2*k, xb
	case MSE:
		k := float64(in[0].Shape.Elems())
		c.FwdFLOPs, c.BwdInputFLOPs, c.StashBytes = 3*k, 3*k, inBytes
	case BCEWithLogits:
		k := float64(in[0].Shape.Elems())
		c.FwdFLOPs, c.BwdInputFLOPs, c.StashBytes = 8*k, 6*k, inBytes
	case Opaque:
		c.FwdFLOPs = a.FlopsFwd
		c.BwdInputFLOPs = a.FlopsBwd
		if a.Params > 0 { // no better knowledge: half for the inputs, half for the weights
			c.BwdInputFLOPs, c.BwdWeightFLOPs = a.FlopsBwd/2, a.FlopsBwd/2
		}
		c.StashBytes = inBytes
	default:
		flopsV2(op, in, out, c, inBytes, xb, s)
	}
	// Concat, Flatten, Reshape, Transpose, Slice and Pad move memory and
	// stash nothing.
}

// flopsV2 fills the FLOPs and the stash of the ops model@2 adds.
func flopsV2(op *Op, in []*Tensor, out *Tensor, c *Cost, inBytes, xb int64, s *sizer) {
	a := op.Attrs
	n := float64(out.Shape.Elems())
	switch op.Kind {
	case Conv2D:
		x := in[0].Shape
		k := float64(x[0]/a.Groups) * float64(a.Kernel[0]*a.Kernel[1])
		mm := 2 * n * k // n = out · h' · w'
		c.FwdFLOPs, c.BwdInputFLOPs, c.BwdWeightFLOPs = mm, mm, mm
		if a.Bias {
			c.FwdFLOPs += n
			c.BwdWeightFLOPs += n
		}
		c.StashBytes = xb
	case BatchNorm:
		c.FwdFLOPs, c.BwdInputFLOPs, c.BwdWeightFLOPs = 8*n, 10*n, 2*n
		c.StashBytes = xb
	case MaxPool2D:
		c.FwdFLOPs, c.BwdInputFLOPs = n*float64(a.Kernel[0]*a.Kernel[1]), n
		c.StashBytes = c.OutBytes // the argmax of every window
	case AvgPool2D:
		w := n * float64(a.Kernel[0]*a.Kernel[1])
		c.FwdFLOPs, c.BwdInputFLOPs = w, w
	case GlobalAvgPool, ReduceMean, ReduceSum:
		m := float64(in[0].Shape.Elems())
		c.FwdFLOPs, c.BwdInputFLOPs = m, m
	case MatMul:
		k := float64(in[0].Shape[len(in[0].Shape)-1])
		mm := 2 * n * k
		c.FwdFLOPs, c.BwdInputFLOPs, c.StashBytes = mm, 2*mm, inBytes
	case Softmax:
		c.FwdFLOPs, c.BwdInputFLOPs, c.StashBytes = 5*n, 3*n, c.OutBytes
	case Sub, Add:
		c.FwdFLOPs, c.BwdInputFLOPs = n, n
	case Mul, Div:
		c.FwdFLOPs, c.BwdInputFLOPs, c.StashBytes = n, 3*n, inBytes
		if op.Attrs.HasScalar && !(op.Kind == Div && a.Reverse) {
			c.StashBytes = 0
		}
	case Pow, Log, Sqrt, Erf:
		c.FwdFLOPs, c.BwdInputFLOPs, c.StashBytes = 4*n, 4*n, xb
	case Exp:
		c.FwdFLOPs, c.BwdInputFLOPs, c.StashBytes = 4*n, n, c.OutBytes
	case Neg:
		c.FwdFLOPs, c.BwdInputFLOPs = n, n
	case Dropout:
		// the mask is a function of (seed, step, op, sample): drawn again
		// by the backward pass, not stashed
		c.FwdFLOPs, c.BwdInputFLOPs = 12*n, 12*n
	case Parameter:
		c.FwdFLOPs, c.BwdWeightFLOPs = n, n
	}
}

// attention costs torch.nn.MultiheadAttention as self-attention on x [s, d]
// with h heads: QKV projection, scores, softmax, weighted sum, out projection.
func attention(x Shape, h int64, c *Cost, s *sizer) {
	sl, d, hf := float64(x[0]), float64(x[1]), float64(h)
	proj := 2*sl*d*3*d + 3*d*sl // in_proj, with bias
	outp := 2*sl*d*d + sl*d     // out_proj, with bias
	scores := 2 * sl * sl * d   // Q·Kᵀ over all heads
	mix := 2 * sl * sl * d      // P·V over all heads
	soft := 5 * hf * sl * sl    // scale, max, exp, sum, divide
	c.FwdFLOPs = proj + outp + scores + mix + soft
	c.BwdWeightFLOPs = proj + outp
	c.BwdInputFLOPs = (proj - 3*d*sl) + (outp - sl*d) + 2*scores + 2*mix + soft
	// stash: x, q|k|v, attention probabilities, the pre-projection context
	sd := s.mul(x[0], x[1])
	c.StashBytes = s.mul(4, s.add(sd, s.mul(3, sd), s.mul(h, x[0], x[0]), sd))
}
