package onnx

import (
	"math"

	"github.com/graphpipe/graphpipe/dag"
)

// hardSigmoidOp: HardSigmoid, max(0, min(1, alpha·x + beta)), ONNX's
// defaults alpha 0.2 and beta 0.5 written into the op (graphpipe's are
// PyTorch's 1/6 and 1/2).
func hardSigmoidOp(n *node) error {
	alpha, beta := n.attrFloat("alpha", 0.2), n.attrFloat("beta", 0.5)
	if math.IsNaN(alpha) || math.IsInf(alpha, 0) || math.IsNaN(beta) || math.IsInf(beta, 0) {
		return n.refuse("alpha %g, beta %g: HardSigmoid's slope and offset must be finite", alpha, beta)
	}
	if v := n.in(0); v.kind != kAct {
		cv, _, err := n.asConst(0)
		if err != nil {
			return err
		}
		out, err := foldHardSigmoid(cv, alpha, beta)
		if err != nil {
			return n.refuse("%v", err)
		}
		n.set(0, out)
		return nil
	}
	x, err := n.act(0)
	if err != nil {
		return err
	}
	return n.emitLike(x, dag.HardSigmoid, []string{x.t}, func(a *dag.Attrs) { a.Alpha, a.Beta = alpha, beta })
}

// unaryOp maps an elementwise op of one input; kind "" is evaluated on
// constants only (Reciprocal is 1/x on activations).
func unaryOp(kind dag.Kind) handler {
	return func(n *node) error {
		if v := n.in(0); v.kind != kAct {
			cv, _, err := n.asConst(0)
			if err != nil {
				return err
			}
			out, err := foldUnary(n.p.GetOpType(), cv)
			if err != nil {
				return n.refuse("%v", err)
			}
			n.set(0, out)
			return nil
		}
		x, err := n.act(0)
		if err != nil {
			return err
		}
		if n.p.GetOpType() == "Reciprocal" {
			return n.emitLike(x, dag.Div, []string{x.t}, func(a *dag.Attrs) { a.Scalar, a.HasScalar, a.Reverse = 1, true, true })
		}
		if kind == "" {
			return n.refuse("%s of an activation has no graphpipe op", n.p.GetOpType())
		}
		return n.emitLike(x, kind, []string{x.t}, nil)
	}
}

// emitLike emits an op whose output has x's ONNX dims and layout.
func (n *node) emitLike(x *value, kind dag.Kind, inputs []string, set func(a *dag.Attrs)) error {
	name, _ := n.c.emit(n.p.GetName(), kind, inputs, attrs(kind, set), nil)
	out := *x
	out.t, out.prod = name, -1
	n.set(0, &out)
	return nil
}

var arith = map[string]dag.Kind{"Add": dag.Add, "Sub": dag.Sub, "Mul": dag.Mul, "Div": dag.Div, "Pow": dag.Pow}

func binaryOp(n *node) error {
	op := n.p.GetOpType()
	x, y := n.in(0), n.in(1)
	if x.kind != kAct && y.kind != kAct {
		cs, _, err := n.allConst()
		if err != nil {
			return err
		}
		out, err := foldBinary(op, cs[0], cs[1])
		if err != nil {
			return n.refuse("%v", err)
		}
		n.set(0, out)
		return nil
	}
	kind, ok := arith[op]
	if !ok {
		return n.refuse("%s of activations has no graphpipe op", op)
	}
	if done, err := n.scalarForm(kind, x, y); done || err != nil {
		return err
	}
	if done, err := n.fuseBias(x, y); done || err != nil {
		return err
	}
	if kind == dag.Pow {
		return n.refuse("raises to a power that is not a known scalar")
	}
	xa, err := n.operand(0)
	if err != nil {
		return err
	}
	ya, err := n.operand(1)
	if err != nil {
		return err
	}
	return n.actBinary(kind, xa, ya)
}

// scalarForm takes an op with a one-element constant operand as the op's
// scalar form.
func (n *node) scalarForm(kind dag.Kind, x, y *value) (bool, error) {
	if y.kind != kAct {
		cy, _, err := n.asConst(1)
		if err != nil {
			return true, err
		}
		if s, ok := cy.scalar(); ok && len(cy.dims) <= len(x.dims) {
			xa, err := n.act(0)
			if err != nil {
				return true, err
			}
			if kind == dag.Pow {
				return true, n.emitLike(xa, dag.Pow, []string{xa.t}, func(a *dag.Attrs) { a.Exponent = s })
			}
			return true, n.emitLike(xa, kind, []string{xa.t}, func(a *dag.Attrs) { a.Scalar, a.HasScalar = s, true })
		}
		return false, nil
	}
	if x.kind != kAct {
		cx, _, err := n.asConst(0)
		if err != nil {
			return true, err
		}
		if s, ok := cx.scalar(); ok && len(cx.dims) <= len(y.dims) {
			ya, err := n.act(1)
			if err != nil {
				return true, err
			}
			if kind == dag.Pow {
				return true, n.refuse("raises a constant to an activation's power")
			}
			return true, n.emitLike(ya, kind, []string{ya.t}, func(a *dag.Attrs) {
				a.Scalar, a.HasScalar, a.Reverse = s, true, kind == dag.Sub || kind == dag.Div
			})
		}
	}
	return false, nil
}

// operand is input i as an activation: a weight becomes a parameter op, a
// constant a constant op, each the same for every sample.
func (n *node) operand(i int) (*value, error) {
	v := n.in(i)
	switch v.kind {
	case kAct:
		return n.act(i)
	case kWeight:
		return n.c.parameter(n, v)
	}
	if v.length() > 1<<20 {
		return nil, n.refuse("its constant operand of %d elements is too large to write in the model", v.length())
	}
	cv, err := castConst(v, false)
	if err != nil {
		return nil, n.refuse("%v", err)
	}
	name, _ := n.c.emit(n.p.GetName()+":const", dag.Constant, nil, attrs(dag.Constant, func(a *dag.Attrs) {
		a.Shape, a.Values = dag.Shape(append([]int64{}, cv.dims...)), cv.floats
	}), nil)
	return &value{kind: kAct, dims: cv.dims, t: name, dtype: dag.Float32, j: -1, prod: -1}, nil
}

// parameter makes a weight used as an activation a parameter op (the same
// for every sample), keeping the weight's name and shape.
func (c *converter) parameter(n *node, v *value) (*value, error) {
	if v.perm != nil {
		return nil, n.refuse("uses a transposed weight as an operand")
	}
	s := c.f.inits[v.init]
	if !isFloat(s.dtype) {
		return nil, n.refuse("uses integer initializer %q as an operand", v.init)
	}
	for _, d := range s.dims {
		if d < 1 {
			return nil, n.refuse("initializer %q has an empty dim", v.init)
		}
	}
	if err := c.own(n, v.init, "parameter"); err != nil {
		return nil, err
	}
	hint := v.init
	name, _ := c.emit(hint, dag.Parameter, nil, attrs(dag.Parameter, func(a *dag.Attrs) { a.Shape = dag.Shape(append([]int64{}, s.dims...)) }),
		map[string]string{"value": v.init})
	c.addWeight(v.init)
	return &value{kind: kAct, dims: s.dims, t: name, dtype: dag.Float32, j: -1, prod: -1}, nil
}

// own records that op takes initializer name as a parameter; an
// initializer two ops take is refused (ops do not share parameters), and so
// is one that is not float32 or has no elements.
func (c *converter) own(n *node, name, op string) error {
	if err := n.checkWeight(name); err != nil {
		return err
	}
	if o, dup := c.owner[name]; dup {
		return n.refuse("takes weight %q, which node %q takes too; graphpipe does not share parameters between ops", name, o)
	}
	c.owner[name] = n.p.GetName()
	return nil
}

// addWeight lists an initializer among the model's weights.
func (c *converter) addWeight(name string) {
	s := c.f.inits[name]
	c.weights = append(c.weights, Weight{Name: name, Shape: s.dims, src: s})
}

// actBinary is an elementwise op of two activations, broadcast.
func (n *node) actBinary(kind dag.Kind, x, y *value) error {
	if x.j < 0 && y.j >= 0 {
		return n.actBinaryOrdered(kind, y, x, true)
	}
	return n.actBinaryOrdered(kind, x, y, false)
}

// actBinaryOrdered computes with x holding the batch (or neither doing so);
// swapped says the op's first operand is y.
func (n *node) actBinaryOrdered(kind dag.Kind, x, y *value, swapped bool) error {
	c := n.c
	r := max(len(x.dims), len(y.dims))
	pad := func(v *value) []int64 {
		return append(make1(r-len(v.dims)), v.dims...)
	}
	px, py := pad(x), pad(y)
	out := &value{kind: kAct, dtype: dag.Float32, j: -1, prod: -1}
	if x.j >= 0 {
		out.j, out.a, out.b = x.j+r-len(x.dims), x.a, x.b
	}
	if y.j >= 0 {
		if !sameLayout(x, y) {
			return n.refuse("its operands hold the batch in different places")
		}
	} else if x.j >= 0 && py[out.j] != 1 {
		return n.refuse("its constant operand varies along the batch axis %d", out.j)
	}
	if x.j >= 0 && y.j >= 0 && px[out.j] != py[out.j] {
		return n.refuse("its operands' batch dims differ")
	}
	dims, err := broadcastDims(px, py)
	if err != nil {
		return n.refuse("%v", err)
	}
	out.dims = dims
	yt := y.t
	if y.j < 0 && x.j >= 0 { // give the constant the per-sample layout of the result
		aligned := &value{kind: kAct, dims: py, j: out.j, a: x.a, b: x.b}
		yt = c.materialize(n.p.GetName(), y.t, y.canon(), ones(aligned))
	}
	ins := []string{x.t, yt}
	if swapped {
		ins = []string{yt, x.t}
	}
	if kind == dag.Add && ins[0] == ins[1] {
		kind, ins = dag.Mul, ins[:1] // x + x
		name, _ := c.emit(n.p.GetName(), kind, ins, attrs(kind, func(a *dag.Attrs) { a.Scalar, a.HasScalar = 2, true }), nil)
		out.t = name
		n.set(0, out)
		return nil
	}
	out.t, _ = c.emit(n.p.GetName(), kind, ins, attrs(kind, nil), nil)
	n.set(0, out)
	return nil
}

func make1(k int) []int64 {
	out := make([]int64, k)
	for i := range out {
		out[i] = 1
	}
	return out
}

// ones is the per-sample shape of a constant aligned to a batched result:
// its dims with the batch position (a 1) given the result's factors as 1s.
func ones(v *value) dag.Shape {
	out := dag.Shape{}
	for i, d := range v.dims {
		if i != v.j {
			out = append(out, d)
			continue
		}
		if v.a > 1 {
			out = append(out, 1)
		}
		if v.b > 1 {
			out = append(out, 1)
		}
	}
	return out
}

// fuseBias makes Add(linear, bias) the linear's bias, when the linear's
// output feeds nothing else and the bias is a weight of its width.
func (n *node) fuseBias(x, y *value) (bool, error) {
	if n.p.GetOpType() != "Add" {
		return false, nil
	}
	lin, bias, linIn := x, y, 0
	if y.kind == kAct {
		lin, bias, linIn = y, x, 1
	}
	if lin.kind != kAct || lin.prod < 0 || bias.kind != kWeight || bias.perm != nil || n.c.uses[n.inName(linIn)] != 1 {
		return false, nil
	}
	op := &n.c.ops[lin.prod]
	if op.Kind != dag.Linear || op.Attrs.Bias || len(bias.dims) != 1 || bias.dims[0] != op.Attrs.Out {
		return false, nil
	}
	if err := n.c.own(n, bias.init, "bias"); err != nil {
		return true, err
	}
	op.Attrs.Bias = true
	op.ParamNames["bias"] = bias.init
	n.c.addWeight(bias.init)
	out := *lin
	out.prod = -1
	n.set(0, &out)
	return true, nil
}

func matmulOp(n *node) error {
	x, w := n.in(0), n.in(1)
	if x.kind != kAct {
		if w.kind == kAct {
			return n.refuse("multiplies a constant or weight by an activation from the left")
		}
		cs, _, err := n.allConst()
		if err != nil {
			return err
		}
		_ = cs
		return n.refuse("multiplies two constants")
	}
	xa, err := n.act(0)
	if err != nil {
		return err
	}
	if w.kind == kWeight {
		layout := "in_out"
		if w.perm != nil {
			layout = "out_in"
		}
		return n.linear(xa, w, layout, false, nil)
	}
	if w.kind == kConst {
		return n.refuse("multiplies by a constant matrix; graphpipe multiplies by weights (initializers) or activations")
	}
	ya, err := n.act(1)
	if err != nil {
		return err
	}
	return n.matmulActs(xa, ya)
}

// linear makes a linear op of x by weight w ([in, out] for "in_out", or w
// the transpose of an [out, in] initializer for "out_in"), with bias b.
func (n *node) linear(x, w *value, layout string, hasBias bool, b *value) error {
	r := len(x.dims)
	if r == 0 || x.j == r-1 {
		return n.refuse("multiplies along the batch axis")
	}
	s := n.c.f.inits[w.init]
	if len(s.dims) != 2 || !isFloat(s.dtype) {
		return n.refuse("weight %q is %v of %s, not a float matrix", w.init, s.dims, s.dtype)
	}
	in, out := s.dims[0], s.dims[1]
	if layout == "out_in" {
		in, out = out, in
	}
	if x.dims[r-1] != in {
		return n.refuse("multiplies rows of %d by weight %q of %v", x.dims[r-1], w.init, s.dims)
	}
	if err := n.c.own(n, w.init, "weight"); err != nil {
		return err
	}
	params := map[string]string{"weight": w.init}
	if hasBias {
		if err := n.c.own(n, b.init, "bias"); err != nil {
			return err
		}
		params["bias"] = b.init
	}
	name, idx := n.c.emit(opHint(n, w.init), dag.Linear, []string{x.t}, attrs(dag.Linear, func(a *dag.Attrs) {
		a.Out, a.Bias, a.WeightLayout = out, hasBias, layout
	}), params)
	n.c.addWeight(w.init)
	if hasBias {
		n.c.addWeight(b.init)
	}
	o := *x
	o.dims = append(append([]int64(nil), x.dims[:r-1]...), out)
	o.t, o.prod = name, idx
	if hasBias {
		o.prod = -1
	}
	n.set(0, &o)
	return nil
}

// opHint names an op after its weight's module (fc.weight → fc), or its node.
func opHint(n *node, weight string) string {
	for _, suffix := range []string{".weight", "_weight", ".scale"} {
		if len(weight) > len(suffix) && weight[len(weight)-len(suffix):] == suffix {
			return weight[:len(weight)-len(suffix)]
		}
	}
	return n.p.GetName()
}

// matmulActs multiplies two activations, batched over their leading dims.
func (n *node) matmulActs(x, y *value) error {
	rx, ry := len(x.dims), len(y.dims)
	if rx < 2 || ry < 2 || rx != ry {
		return n.refuse("multiplies activations of ranks %d and %d; graphpipe's matmul takes equal ranks of at least 2", rx, ry)
	}
	if x.j >= rx-2 || y.j >= ry-2 || !sameLayout(x, y) {
		return n.refuse("multiplies activations whose batch is not in the same leading axis")
	}
	for i := 0; i < rx-2; i++ {
		if x.dims[i] != y.dims[i] {
			return n.refuse("its leading dims %v and %v differ (graphpipe does not broadcast them)", x.dims[:rx-2], y.dims[:ry-2])
		}
	}
	if x.dims[rx-1] != y.dims[ry-2] {
		return n.refuse("multiplies [.., %d] by [%d, ..]", x.dims[rx-1], y.dims[ry-2])
	}
	name, _ := n.c.emit(n.p.GetName(), dag.MatMul, []string{x.t, y.t}, attrs(dag.MatMul, nil), nil)
	out := *x
	out.dims = append(append([]int64(nil), x.dims[:rx-1]...), y.dims[ry-1])
	out.t, out.prod = name, -1
	n.set(0, &out)
	return nil
}

func gemmOp(n *node) error {
	x, err := n.act(0)
	if err != nil {
		return err
	}
	w, b := n.in(1), n.in(2)
	switch {
	case n.attrInt("transA", 0) != 0:
		return n.refuse("transA: the batch would be the contracted axis")
	case n.attrFloat("alpha", 1) != 1:
		return n.refuse("alpha %g: graphpipe's linear does not scale its product", n.attrFloat("alpha", 1))
	case w.kind != kWeight || w.perm != nil:
		return n.refuse("multiplies by %q, which is not a weight (initializer)", n.inName(1))
	case len(x.dims) != 2:
		return n.refuse("input is not a matrix")
	}
	layout := "in_out"
	if n.attrInt("transB", 0) != 0 {
		layout = "out_in"
	}
	hasBias := b != nil
	if hasBias {
		out := w.dims[1]
		if layout == "out_in" {
			out = w.dims[0]
		}
		switch {
		case n.attrFloat("beta", 1) != 1:
			return n.refuse("beta %g: graphpipe's linear does not scale its bias", n.attrFloat("beta", 1))
		case b.kind != kWeight || len(b.dims) != 1 || b.dims[0] != out:
			return n.refuse("C %q is not a bias weight of %d", n.inName(2), out)
		}
	}
	return n.linear(x, w, layout, hasBias, b)
}

func softmaxOp(n *node) error {
	x, err := n.act(0)
	if err != nil {
		return err
	}
	def := int64(-1)
	if n.c.f.Opset < 13 {
		def = 1
	}
	ax, err := axisOf(n.attrInt("axis", def), len(x.dims))
	if err != nil {
		return n.refuse("%v", err)
	}
	if n.c.f.Opset < 13 && ax != len(x.dims)-1 {
		return n.refuse("before opset 13 Softmax normalises axes %d..%d together; graphpipe's softmax takes one axis (re-export with opset 13 or later)", ax, len(x.dims)-1)
	}
	sax, err := sampleAxis(x, ax, "the softmax")
	if err != nil {
		return n.refuse("%v", err)
	}
	return n.emitLike(x, dag.Softmax, []string{x.t}, func(a *dag.Attrs) { a.Axis = int64(sax) })
}

func reduceOp(kind dag.Kind) handler {
	return func(n *node) error {
		x, err := n.act(0)
		if err != nil {
			return err
		}
		axes, _, err := n.axesOf(1)
		if err != nil {
			return err
		}
		keep := n.attrInt("keepdims", 1) != 0
		if len(axes) == 0 {
			if n.attrInt("noop_with_empty_axes", 0) != 0 {
				n.set(0, x)
				return nil
			}
			return n.refuse("reduces every axis, the batch's included")
		}
		red := make([]bool, len(x.dims))
		var cax dag.Shape
		for _, a := range axes {
			ax, err := axisOf(a, len(x.dims))
			if err != nil {
				return n.refuse("%v", err)
			}
			sax, err := sampleAxis(x, ax, "the reduction")
			if err != nil {
				return n.refuse("%v", err)
			}
			if !red[ax] {
				cax = append(cax, int64(sax))
			}
			red[ax] = true
		}
		out := &value{kind: kAct, dtype: dag.Float32, a: x.a, b: x.b, j: -1, prod: -1}
		for i, d := range x.dims {
			switch {
			case i == x.j:
				out.j = len(out.dims)
				out.dims = append(out.dims, d)
			case !red[i]:
				out.dims = append(out.dims, d)
			case keep:
				out.dims = append(out.dims, 1)
			}
		}
		out.t, _ = n.c.emit(n.p.GetName(), kind, []string{x.t}, attrs(kind, func(a *dag.Attrs) { a.Axes, a.KeepDims = cax, keep }), nil)
		n.set(0, out)
		return nil
	}
}

func dropoutOp(n *node) error {
	if err := n.onlyFirstOutput(); err != nil {
		return err
	}
	ratio := n.attrFloat("ratio", 0.5) // opset < 12
	if n.in(1) != nil {
		cv, ok, err := n.asConst(1)
		if err != nil {
			return err
		}
		s, isScalar := cv.scalar()
		if !ok || !isScalar {
			return n.refuse("its ratio is not a known scalar")
		}
		ratio = s
	} else if n.c.f.Opset >= 12 {
		ratio = 0.5
	}
	training := false
	if n.in(2) != nil {
		cv, ok, err := n.asConst(2)
		if err != nil {
			return err
		}
		s, isScalar := cv.scalar()
		if !ok || !isScalar {
			return n.refuse("its training_mode is not known when importing")
		}
		training = s != 0
	}
	if !training || ratio == 0 {
		n.set(0, n.in(0))
		return nil
	}
	if ratio < 0 || ratio >= 1 {
		return n.refuse("ratio %g is not in [0, 1)", ratio)
	}
	x, err := n.act(0)
	if err != nil {
		return err
	}
	return n.emitLike(x, dag.Dropout, []string{x.t}, func(a *dag.Attrs) { a.P = ratio })
}

// checkWeight refuses a weight that is not float32 or has no elements.
func (n *node) checkWeight(name string) error {
	s := n.c.f.inits[name]
	if s.dtype != tFloat {
		return n.refuse("weight %q is %s; graphpipe's parameters are float32 (export the model in float32)", name, s.dtype)
	}
	if s.n == 0 {
		return n.refuse("weight %q of dims %v has no elements", name, s.dims)
	}
	return nil
}
