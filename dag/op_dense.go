package dag

// The rows' pieces of the dense ops: linear, layer_norm, attention,
// embedding, embedding_bag, dot_interaction and matmul.

func linearDefaults(a *Attrs) {
	a.Bias = true
	a.WeightLayout = "out_in"
}

func checkLinear(ck *attrChecker) {
	a := &ck.op.Attrs
	ck.positive("out", a.Out)
	if a.WeightLayout != "out_in" && a.WeightLayout != "in_out" {
		ck.fail("weight_layout", `must be "out_in" or "in_out", got %q`, a.WeightLayout)
	}
}

// inferLinear: x [..., in] → [..., out].
func inferLinear(f *inferer) (Shape, DType) {
	f.float(0)
	if !f.minRank(0, 1) {
		return nil, Float32
	}
	return withLast(f.in[0].Shape, f.op.Attrs.Out), Float32
}

// linearSlots: weight [out, in] (PyTorch's) or [in, out], bias [out].
func linearSlots(a *Attrs, in []*Tensor) (ps, bufs []Param) {
	x := in[0].Shape
	w := Shape{a.Out, x[len(x)-1]}
	if a.WeightLayout == "in_out" {
		w = Shape{x[len(x)-1], a.Out}
	}
	ps = []Param{{Name: "weight", Shape: w}}
	if a.Bias {
		ps = append(ps, Param{Name: "bias", Shape: Shape{a.Out}})
	}
	return ps, nil
}

func linearCost(k *costing) {
	c := k.c
	x := k.in[0].Shape
	mm := 2 * k.n * float64(x[len(x)-1]) // n = rows × out
	c.FwdFLOPs, c.BwdInputFLOPs, c.BwdWeightFLOPs = mm, mm, mm
	if k.op.Attrs.Bias {
		c.FwdFLOPs += k.n
		c.BwdWeightFLOPs += k.n
	}
	c.StashBytes = k.xb
}

func layerNormDefaults(a *Attrs) { a.Eps = 1e-5 }

func checkEps(ck *attrChecker) { ck.positiveFloat("eps", ck.op.Attrs.Eps) }

// inferNorm is layer_norm's and batch_norm's: x [d, ...] → the same shape.
func inferNorm(f *inferer) (Shape, DType) {
	f.float(0)
	f.minRank(0, 1)
	return f.in[0].Shape, Float32
}

// layerNormSlots: weight and bias over the last axis.
func layerNormSlots(_ *Attrs, in []*Tensor) (ps, bufs []Param) {
	x := in[0].Shape
	d := x[len(x)-1]
	return []Param{{Name: "weight", Shape: Shape{d}}, {Name: "bias", Shape: Shape{d}}}, nil
}

func layerNormCost(k *costing) {
	x := k.in[0].Shape
	rows := x.Elems() / x[len(x)-1]
	k.c.FwdFLOPs, k.c.BwdInputFLOPs, k.c.BwdWeightFLOPs = 8*k.n, 10*k.n, 2*k.n
	k.c.StashBytes = k.s.add(k.xb, k.s.mul(rows, 2, 4)) // x, mean and 1/std per row
}

func checkEmbedding(ck *attrChecker) {
	ck.positive("num", ck.op.Attrs.Num)
	ck.positive("dim", ck.op.Attrs.Dim)
}

func embeddingBagDefaults(a *Attrs) { a.Mode = "mean" } // torch.nn.EmbeddingBag's default

func checkEmbeddingBag(ck *attrChecker) {
	checkEmbedding(ck)
	if m := ck.op.Attrs.Mode; m != "sum" && m != "mean" {
		ck.fail("mode", `must be "sum" or "mean", got %q`, m)
	}
}

// inferEmbedding: int32 indices [...] → [..., dim].
func inferEmbedding(f *inferer) (Shape, DType) {
	f.int32(0)
	f.bounded(0, f.op.Attrs.Num, "attrs.num")
	return withAppended(f.in[0].Shape, f.op.Attrs.Dim), Float32
}

// inferEmbeddingBag: int32 indices [bag] → [dim].
func inferEmbeddingBag(f *inferer) (Shape, DType) {
	f.int32(0)
	f.rank(0, 1)
	f.bounded(0, f.op.Attrs.Num, "attrs.num")
	return Shape{f.op.Attrs.Dim}, Float32
}

// embeddingSlots: weight [num, dim].
func embeddingSlots(a *Attrs, _ []*Tensor) (ps, bufs []Param) {
	return []Param{{Name: "weight", Shape: Shape{a.Num, a.Dim}}}, nil
}

// embeddingCost: a gather forward, a scatter-add into the weight gradient
// backward.
func embeddingCost(k *costing) {
	n := float64(k.in[0].Shape.Elems()) * float64(k.op.Attrs.Dim)
	k.c.FwdFLOPs, k.c.BwdWeightFLOPs = n, n
	k.c.StashBytes = k.xb
}

func checkAttention(ck *attrChecker) { ck.positive("heads", ck.op.Attrs.Heads) }

// inferAttention: self-attention on x [s, d] → [s, d].
func inferAttention(f *inferer) (Shape, DType) {
	f.float(0)
	if !f.rank(0, 2) {
		return nil, Float32
	}
	x, h := f.in[0], f.op.Attrs.Heads
	if h > 0 && x.Shape[1]%h != 0 {
		f.fail("attrs.heads", "model width %d of input %q is not divisible by %d heads", x.Shape[1], x.Name, h)
	}
	return x.Shape, Float32
}

// attentionSlots are torch.nn.MultiheadAttention's.
func attentionSlots(_ *Attrs, in []*Tensor) (ps, bufs []Param) {
	d := in[0].Shape[1]
	return []Param{
		{Name: "in_proj_weight", Shape: Shape{3 * d, d}}, {Name: "in_proj_bias", Shape: Shape{3 * d}},
		{Name: "out_proj.weight", Shape: Shape{d, d}}, {Name: "out_proj.bias", Shape: Shape{d}},
	}, nil
}

// attentionCost costs torch.nn.MultiheadAttention as self-attention on x
// [s, d] with h heads: QKV projection, scores, softmax, weighted sum, out
// projection.
func attentionCost(k *costing) {
	x, c, s := k.in[0].Shape, k.c, k.s
	sl, d, hf := float64(x[0]), float64(x[1]), float64(k.op.Attrs.Heads)
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
	c.StashBytes = s.mul(4, s.add(sd, s.mul(3, sd), s.mul(k.op.Attrs.Heads, x[0], x[0]), sd))
	c.ScoreFLOPs, c.ScoreBytes = scores+mix, s.mul(4, k.op.Attrs.Heads, x[0], x[0])
}

// inferDot: m vectors [d] → their m(m−1)/2 pairwise dot products.
func inferDot(f *inferer) (Shape, DType) {
	f.allFloat()
	for i := range f.in {
		f.rank(i, 1)
	}
	f.sameShapes()
	n := int64(len(f.in))
	return Shape{n * (n - 1) / 2}, Float32
}

func dotCost(k *costing) {
	pairs, d := k.n, float64(k.in[0].Shape[0])
	k.c.FwdFLOPs, k.c.BwdInputFLOPs, k.c.StashBytes = 2*pairs*d, 4*pairs*d, k.inBytes
}

// inferMatMul: a [..., m, k] · b [..., k, n] → [..., m, n].
func inferMatMul(f *inferer) (Shape, DType) {
	f.allFloat()
	a, b := f.in[0], f.in[1]
	if !f.minRank(0, 2) || !f.minRank(1, 2) {
		return nil, Float32
	}
	r := len(a.Shape)
	ok := len(b.Shape) == r && a.Shape[r-1] == b.Shape[r-2]
	for i := 0; ok && i < r-2; i++ {
		ok = a.Shape[i] == b.Shape[i]
	}
	if !ok {
		f.fail("inputs", "cannot multiply %q of shape %v by %q of shape %v (same rank and leading dims, and [..., m, k]·[..., k, n])", a.Name, a.Shape, b.Name, b.Shape)
		return nil, Float32
	}
	return append(append(Shape{}, a.Shape[:r-1]...), b.Shape[r-1]), Float32
}

func matmulCost(k *costing) {
	x := k.in[0].Shape
	mm := 2 * k.n * float64(x[len(x)-1])
	k.c.FwdFLOPs, k.c.BwdInputFLOPs, k.c.StashBytes = mm, 2*mm, k.inBytes
}
