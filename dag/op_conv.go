package dag

// The rows' pieces of the image ops: conv2d, batch_norm, max_pool2d,
// avg_pool2d and global_avg_pool, on per-sample images [c, h, w].

func conv2DDefaults(a *Attrs) {
	a.Stride, a.Padding, a.Dilation, a.Groups, a.Bias = Shape{1, 1}, Shape{0, 0, 0, 0}, Shape{1, 1}, 1, true
}

func checkConv2D(ck *attrChecker) {
	ck.positive("out", ck.op.Attrs.Out)
	ck.positive("groups", ck.op.Attrs.Groups)
	ck.window(true)
}

// inferConv2D: x [c, h, w] → [out, h', w'].
func inferConv2D(f *inferer) (Shape, DType) {
	a := f.op.Attrs
	x := f.in[0]
	f.float(0)
	if !f.rank(0, 3) || !f.ok {
		return nil, Float32
	}
	if a.Groups > 0 && (x.Shape[0]%a.Groups != 0 || a.Out%a.Groups != 0) {
		f.fail("attrs.groups", "%d groups divide neither the %d input channels of %q nor the %d outputs", a.Groups, x.Shape[0], x.Name, a.Out)
		return nil, Float32
	}
	h, w := f.windows(a.Dilation)
	return Shape{a.Out, h, w}, Float32
}

// conv2DSlots: weight [out, c/groups, kh, kw], bias [out].
func conv2DSlots(a *Attrs, in []*Tensor) (ps, bufs []Param) {
	ps = []Param{{Name: "weight", Shape: Shape{a.Out, in[0].Shape[0] / a.Groups, a.Kernel[0], a.Kernel[1]}}}
	if a.Bias {
		ps = append(ps, Param{Name: "bias", Shape: Shape{a.Out}})
	}
	return ps, nil
}

func conv2DCost(k *costing) {
	a, c := &k.op.Attrs, k.c
	x := k.in[0].Shape
	kk := float64(x[0]/a.Groups) * float64(a.Kernel[0]*a.Kernel[1])
	mm := 2 * k.n * kk // n = out · h' · w'
	c.FwdFLOPs, c.BwdInputFLOPs, c.BwdWeightFLOPs = mm, mm, mm
	if a.Bias {
		c.FwdFLOPs += k.n
		c.BwdWeightFLOPs += k.n
	}
	c.StashBytes = k.xb
}

func batchNormDefaults(a *Attrs) { a.Eps, a.Momentum = 1e-5, 0.1 }

func checkBatchNorm(ck *attrChecker) {
	checkEps(ck)
	if m := ck.op.Attrs.Momentum; !(m >= 0 && m <= 1) {
		ck.fail("momentum", "must be a number in [0, 1], got %g", m)
	}
}

// batchNormSlots: weight and bias per channel, the running statistics as
// buffers.
func batchNormSlots(_ *Attrs, in []*Tensor) (ps, bufs []Param) {
	c := in[0].Shape[0]
	return []Param{{Name: "weight", Shape: Shape{c}}, {Name: "bias", Shape: Shape{c}}},
		[]Param{{Name: "running_mean", Shape: Shape{c}}, {Name: "running_var", Shape: Shape{c}}}
}

func batchNormCost(k *costing) {
	k.c.FwdFLOPs, k.c.BwdInputFLOPs, k.c.BwdWeightFLOPs = 8*k.n, 10*k.n, 2*k.n
	k.c.StashBytes = k.xb
}

func maxPoolDefaults(a *Attrs) { a.Padding, a.Dilation = Shape{0, 0, 0, 0}, Shape{1, 1} }

func avgPoolDefaults(a *Attrs) { a.Padding, a.CountIncludePad = Shape{0, 0, 0, 0}, true }

// poolDerive: a pool's stride is its kernel unless given.
func poolDerive(a *Attrs, given func(string) bool) {
	if !given("stride") {
		a.Stride = append(Shape{}, a.Kernel...)
	}
}

func checkMaxPool(ck *attrChecker) { ck.window(true) }

func checkAvgPool(ck *attrChecker) { ck.window(false) }

// inferMaxPool and inferAvgPool: x [c, h, w] → [c, h', w'].
func inferMaxPool(f *inferer) (Shape, DType) { return f.pool(f.op.Attrs.Dilation) }

func inferAvgPool(f *inferer) (Shape, DType) { return f.pool(Shape{1, 1}) }

func (f *inferer) pool(dil Shape) (Shape, DType) {
	f.float(0)
	if !f.rank(0, 3) || !f.ok {
		return nil, Float32
	}
	h, w := f.windows(dil)
	return Shape{f.in[0].Shape[0], h, w}, Float32
}

func maxPoolCost(k *costing) {
	a := &k.op.Attrs
	k.c.FwdFLOPs, k.c.BwdInputFLOPs = k.n*float64(a.Kernel[0]*a.Kernel[1]), k.n
	k.c.StashBytes = k.c.OutBytes // the argmax of every window
}

func avgPoolCost(k *costing) {
	a := &k.op.Attrs
	w := k.n * float64(a.Kernel[0]*a.Kernel[1])
	k.c.FwdFLOPs, k.c.BwdInputFLOPs = w, w
}

// inferGlobalAvgPool: x [c, ...] → [c, 1, ...].
func inferGlobalAvgPool(f *inferer) (Shape, DType) {
	f.float(0)
	if !f.minRank(0, 2) {
		return nil, Float32
	}
	out := make(Shape, len(f.in[0].Shape))
	for i := range out {
		out[i] = 1
	}
	out[0] = f.in[0].Shape[0]
	return out, Float32
}

// WindowOut is the output length of a convolution or pool along one axis:
// input length n, padding lo and hi, kernel k, stride s, dilation d, with
// PyTorch's ceil_mode rule. It is ≤ 0 when no window fits, and 0 for a
// kernel, stride or dilation below 1, which no window has: a caller that
// has not run the attribute checks (an importer sizing a node before it
// emits the op) gets a refusal to report, not a division by zero.
func WindowOut(n, lo, hi, k, s, d int64, ceil bool) int64 {
	if k < 1 || s < 1 || d < 1 {
		return 0
	}
	span := n + lo + hi - d*(k-1) - 1
	if span < 0 {
		return 0
	}
	if !ceil {
		return span/s + 1
	}
	out := (span+s-1)/s + 1
	if (out-1)*s >= n+lo { // the last window would start in the padding
		out--
	}
	return out
}

// windows is the output height and width of a convolution or pool whose
// attributes checkAttrs has passed.
func (f *inferer) windows(dil Shape) (int64, int64) {
	a := f.op.Attrs
	x := f.in[0].Shape
	var out [2]int64
	for i := 0; i < 2; i++ {
		lo, hi := a.Padding[i], a.Padding[i+2]
		span := dil[i]*(a.Kernel[i]-1) + 1
		if lo >= span || hi >= span {
			f.fail("attrs.padding", "padding %d, %d on axis %d is not smaller than the window of %d", lo, hi, i+1, span)
		}
		out[i] = WindowOut(x[i+1], lo, hi, a.Kernel[i], a.Stride[i], dil[i], a.CeilMode)
		if out[i] < 1 {
			f.fail("attrs.kernel", "the window of %d does not fit axis %d of input %q of shape %v with its padding", span, i+1, f.in[0].Name, x)
		}
	}
	return out[0], out[1]
}
