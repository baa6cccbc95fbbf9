package onnx

import (
	"fmt"

	"github.com/graphpipe/graphpipe/dag"
)

// image is input 0 as an activation laid out [N, C, H, W].
func (n *node) image() (*value, error) {
	x, err := n.act(0)
	if err != nil {
		return nil, err
	}
	if !x.batchFirst() {
		return nil, n.refuse("its input does not hold the batch in axis 0 alone")
	}
	if len(x.dims) != 4 {
		return nil, n.refuse("its input has rank %d; graphpipe's convolutions and pools are 2-D ([N, C, H, W])", len(x.dims))
	}
	return x, nil
}

// window reads a conv's or pool's kernel, strides, dilations and pads,
// resolving auto_pad for input height and width hw.
func (n *node) window(kernel []int64, hw []int64, dilated bool) (stride, dil, pads dag.Shape, err error) {
	stride, dil = dag.Shape{1, 1}, dag.Shape{1, 1}
	if s, ok := n.attrInts("strides"); ok {
		stride = s
	}
	if d, ok := n.attrInts("dilations"); ok && dilated {
		dil = d
	} else if ok && !dilated {
		for _, v := range d {
			if v != 1 {
				return nil, nil, nil, n.refuse("dilations %v: graphpipe's average pool is not dilated", d)
			}
		}
	}
	if len(stride) != 2 || len(dil) != 2 || len(kernel) != 2 {
		return nil, nil, nil, n.refuse("kernel %v, strides %v or dilations %v are not 2-D", kernel, stride, dil)
	}
	pads = dag.Shape{0, 0, 0, 0}
	if p, ok := n.attrInts("pads"); ok {
		if len(p) != 4 {
			return nil, nil, nil, n.refuse("pads %v are not [top, left, bottom, right]", p)
		}
		pads = p
	}
	switch ap := n.attrString("auto_pad", "NOTSET"); ap {
	case "NOTSET", "":
	case "VALID":
		pads = dag.Shape{0, 0, 0, 0}
	case "SAME_UPPER", "SAME_LOWER":
		for i := 0; i < 2; i++ {
			if stride[i] < 1 {
				return nil, nil, nil, n.refuse("stride %d", stride[i])
			}
			out := (hw[i] + stride[i] - 1) / stride[i]
			total := max((out-1)*stride[i]+(kernel[i]-1)*dil[i]+1-hw[i], 0)
			lo := total / 2
			if ap == "SAME_LOWER" {
				lo = total - total/2
			}
			pads[i], pads[i+2] = lo, total-lo
		}
	default:
		return nil, nil, nil, n.refuse("auto_pad %q", ap)
	}
	return stride, dil, pads, nil
}

// outImage is an [N, C, H, W] activation after an op made its tensor.
func outImage(x *value, name string, c, h, w int64) *value {
	return &value{kind: kAct, dims: []int64{x.dims[0], c, h, w}, t: name, dtype: dag.Float32, j: 0, a: 1, b: 1, prod: -1}
}

func convOp(n *node) error {
	x, err := n.image()
	if err != nil {
		return err
	}
	w, b := n.in(1), n.in(2)
	if w.kind != kWeight || w.perm != nil {
		return n.refuse("its weight %q is not an initializer", n.inName(1))
	}
	if err := n.checkWeight(w.init); err != nil {
		return err
	}
	s := n.c.f.inits[w.init]
	if len(s.dims) != 4 || !isFloat(s.dtype) {
		return n.refuse("weight %q is %v of %s, not [out, in/groups, kh, kw] floats", w.init, s.dims, s.dtype)
	}
	groups := n.attrInt("group", 1)
	if groups < 1 || x.dims[1] != s.dims[1]*groups {
		return n.refuse("weight %q of %v with %d groups does not take %d channels", w.init, s.dims, groups, x.dims[1])
	}
	kernel := []int64{s.dims[2], s.dims[3]}
	if k, ok := n.attrInts("kernel_shape"); ok && (len(k) != 2 || k[0] != kernel[0] || k[1] != kernel[1]) {
		return n.refuse("kernel_shape %v disagrees with weight %q of %v", k, w.init, s.dims)
	}
	stride, dil, pads, err := n.window(kernel, x.dims[2:], true)
	if err != nil {
		return err
	}
	params := map[string]string{"weight": w.init}
	if b != nil {
		if b.kind != kWeight || len(b.dims) != 1 || b.dims[0] != s.dims[0] {
			return n.refuse("bias %q is not a weight of %d", n.inName(2), s.dims[0])
		}
		params["bias"] = b.init
	}
	for _, p := range params {
		if err := n.c.own(n, p, ""); err != nil {
			return err
		}
	}
	a := attrs(dag.Conv2D, func(a *dag.Attrs) {
		a.Out, a.Kernel, a.Stride, a.Padding, a.Dilation, a.Groups, a.Bias = s.dims[0], kernel, stride, pads, dil, groups, b != nil
	})
	if err := n.checkAttrs(dag.Conv2D, a); err != nil {
		return err
	}
	h := dag.WindowOut(x.dims[2], pads[0], pads[2], kernel[0], stride[0], dil[0], false)
	wd := dag.WindowOut(x.dims[3], pads[1], pads[3], kernel[1], stride[1], dil[1], false)
	if h < 1 || wd < 1 {
		return n.refuse("its window does not fit the %dx%d input", x.dims[2], x.dims[3])
	}
	name, _ := n.c.emit(opHint(n, w.init), dag.Conv2D, []string{x.t}, a, params)
	n.c.addWeight(w.init)
	if b != nil {
		n.c.addWeight(b.init)
	}
	n.set(0, outImage(x, name, s.dims[0], h, wd))
	return nil
}

func batchNormOp(n *node) error {
	x, err := n.act(0)
	if err != nil {
		return err
	}
	if !x.batchFirst() || len(x.dims) < 2 {
		return n.refuse("its input does not hold the batch in axis 0 and the channels in axis 1")
	}
	ch := x.dims[1]
	slots := []string{"weight", "bias", "running_mean", "running_var"}
	params := map[string]string{}
	for i, slot := range slots {
		v := n.in(i + 1)
		if v == nil || v.kind != kWeight || v.perm != nil || len(v.dims) != 1 || v.dims[0] != ch {
			return n.refuse("input %d (%s) is not a weight of %d channels", i+1, slot, ch)
		}
		params[slot] = v.init
	}
	for _, slot := range slots {
		if err := n.c.own(n, params[slot], slot); err != nil {
			return err
		}
	}
	if n.attrInt("training_mode", 1) == 0 {
		n.c.notes = append(n.c.notes, fmt.Sprintf("node %q was exported in inference mode; graphpipe trains it in training mode (batch statistics)", n.p.GetName()))
	}
	mom := n.attrFloat("momentum", 0.9)
	if !(mom >= 0 && mom <= 1) { // ONNX's momentum, 1 minus PyTorch's
		return n.refuse("attribute momentum: must be a number in [0, 1], got %g", mom)
	}
	eps := n.attrFloat("epsilon", 1e-5)
	name, _ := n.c.emit(opHint(n, params["weight"]), dag.BatchNorm, []string{x.t}, attrs(dag.BatchNorm, func(a *dag.Attrs) {
		a.Eps, a.Momentum = eps, roundMomentum(1-mom)
	}), params)
	for _, slot := range slots {
		n.c.addWeight(params[slot])
	}
	out := *x
	out.t, out.prod = name, -1
	n.set(0, &out)
	return nil
}

// roundMomentum undoes float32's rounding of ONNX's momentum (0.9f read as
// 0.8999999762): PyTorch's momentum is 1 minus it, 0.1.
func roundMomentum(m float64) float64 {
	r := float64(float32(m))
	for _, nice := range []float64{0.1, 0.01, 0.001, 0.03, 0.05, 0.2, 0.5, 0.3, 0.003, 0.0003} {
		if d := m - nice; d < 1e-7 && d > -1e-7 {
			return nice
		}
	}
	return r
}

func poolOp(kind dag.Kind) handler {
	return func(n *node) error {
		if err := n.onlyFirstOutput(); err != nil {
			return err
		}
		x, err := n.image()
		if err != nil {
			return err
		}
		kernel, ok := n.attrInts("kernel_shape")
		if !ok || len(kernel) != 2 {
			return n.refuse("kernel_shape %v is not 2-D", kernel)
		}
		stride, dil, pads, err := n.window(kernel, x.dims[2:], kind == dag.MaxPool2D)
		if err != nil {
			return err
		}
		ceil := n.attrInt("ceil_mode", 0) != 0
		a := attrs(kind, func(a *dag.Attrs) {
			a.Kernel, a.Stride, a.Padding, a.CeilMode = kernel, stride, pads, ceil
			if kind == dag.MaxPool2D {
				a.Dilation = dil
			} else {
				a.CountIncludePad = n.attrInt("count_include_pad", 0) != 0
			}
		})
		if err := n.checkAttrs(kind, a); err != nil {
			return err
		}
		h := dag.WindowOut(x.dims[2], pads[0], pads[2], kernel[0], stride[0], dil[0], ceil)
		w := dag.WindowOut(x.dims[3], pads[1], pads[3], kernel[1], stride[1], dil[1], ceil)
		if h < 1 || w < 1 {
			return n.refuse("its window does not fit the %dx%d input", x.dims[2], x.dims[3])
		}
		name, _ := n.c.emit(n.p.GetName(), kind, []string{x.t}, a, nil)
		n.set(0, outImage(x, name, x.dims[1], h, w))
		return nil
	}
}

func globalPoolOp(n *node) error {
	x, err := n.act(0)
	if err != nil {
		return err
	}
	if !x.batchFirst() || len(x.dims) < 3 {
		return n.refuse("its input is not [N, C, spatial...]")
	}
	out := *x
	out.dims = append([]int64(nil), x.dims...)
	for i := 2; i < len(out.dims); i++ {
		out.dims[i] = 1
	}
	out.prod = -1
	if n.p.GetOpType() == "GlobalAveragePool" {
		out.t, _ = n.c.emit(n.p.GetName(), dag.GlobalAvgPool, []string{x.t}, attrs(dag.GlobalAvgPool, nil), nil)
	} else {
		if len(x.dims) != 4 {
			return n.refuse("graphpipe's max pool is 2-D")
		}
		out.t, _ = n.c.emit(n.p.GetName(), dag.MaxPool2D, []string{x.t}, attrs(dag.MaxPool2D, func(a *dag.Attrs) {
			a.Kernel, a.Stride = dag.Shape{x.dims[2], x.dims[3]}, dag.Shape{x.dims[2], x.dims[3]}
		}), nil)
	}
	n.set(0, &out)
	return nil
}

func layerNormOp(n *node) error {
	if err := n.onlyFirstOutput(); err != nil {
		return err
	}
	x, err := n.act(0)
	if err != nil {
		return err
	}
	r := len(x.dims)
	ax, err := axisOf(n.attrInt("axis", -1), r)
	if err != nil {
		return n.refuse("%v", err)
	}
	if ax != r-1 || x.j == r-1 {
		return n.refuse("normalises over axes %d..%d; graphpipe's layer_norm normalises the last axis only", ax, r-1)
	}
	w, b := n.in(1), n.in(2)
	d := x.dims[r-1]
	if w == nil || w.kind != kWeight || len(w.dims) != 1 || w.dims[0] != d {
		return n.refuse("its scale %q is not a weight of %d", n.inName(1), d)
	}
	if b == nil || b.kind != kWeight || len(b.dims) != 1 || b.dims[0] != d {
		return n.refuse("it has no bias weight of %d; graphpipe's layer_norm has one", d)
	}
	for _, p := range []string{w.init, b.init} {
		if err := n.c.own(n, p, ""); err != nil {
			return err
		}
	}
	eps := float64(float32(n.attrFloat("epsilon", 1e-5)))
	name, _ := n.c.emit(opHint(n, w.init), dag.LayerNorm, []string{x.t}, attrs(dag.LayerNorm, func(a *dag.Attrs) { a.Eps = roundEps(eps) }),
		map[string]string{"weight": w.init, "bias": b.init})
	n.c.addWeight(w.init)
	n.c.addWeight(b.init)
	out := *x
	out.t, out.prod = name, -1
	n.set(0, &out)
	return nil
}

// roundEps undoes float32's rounding of an epsilon written 1e-5 or the like.
func roundEps(e float64) float64 {
	for _, nice := range []float64{1e-5, 1e-6, 1e-12, 1e-3, 1e-8, 1e-7, 1e-4} {
		if d := (e - nice) / nice; d < 1e-6 && d > -1e-6 {
			return nice
		}
	}
	return e
}

// embeddingOp is Gather of a weight's rows at integer indices fed per sample.
func embeddingOp(n *node) error {
	w, idx := n.in(0), n.in(1)
	if n.attrInt("axis", 0) != 0 {
		return n.refuse("gathers a weight along axis %d; an embedding gathers rows", n.attrInt("axis", 0))
	}
	s := n.c.f.inits[w.init]
	if len(s.dims) != 2 || !isFloat(s.dtype) || w.perm != nil {
		return n.refuse("weight %q of %v is not a float table", w.init, s.dims)
	}
	if idx.dtype != dag.Int32 {
		return n.refuse("indexes weight %q with floats", w.init)
	}
	if err := n.c.own(n, w.init, "weight"); err != nil {
		return err
	}
	n.c.needRange(idx, s.dims[0])
	name, _ := n.c.emit(opHint(n, w.init), dag.Embedding, []string{idx.t}, attrs(dag.Embedding, func(a *dag.Attrs) {
		a.Num, a.Dim = s.dims[0], s.dims[1]
	}), map[string]string{"weight": w.init})
	n.c.addWeight(w.init)
	out := *idx
	out.dims = append(append([]int64(nil), idx.dims...), s.dims[1])
	out.t, out.dtype, out.prod = name, dag.Float32, -1
	n.set(0, &out)
	return nil
}

// embeddingOfConst is Gather of a weight's rows at indices known when
// importing (learned position embeddings at arange): a constant of the
// indices, embedded; the same for every sample.
func embeddingOfConst(n *node) error {
	w := n.in(0)
	idx, ok, err := n.asConst(1)
	if err != nil || !ok {
		return err
	}
	s := n.c.f.inits[w.init]
	vals := make([]float64, idx.length())
	for k := range vals {
		f, ok := idx.at(k)
		if !ok || !idx.isInt {
			return n.refuse("gathers rows at indices that are not known integers")
		}
		if f < 0 {
			f += float64(s.dims[0])
		}
		if f < 0 || f >= float64(s.dims[0]) {
			return n.refuse("index %g is outside the %d rows of %q", f, s.dims[0], w.init)
		}
		vals[k] = f
	}
	if err := n.c.own(n, w.init, "weight"); err != nil {
		return err
	}
	dims := append([]int64(nil), idx.dims...)
	if len(dims) == 0 {
		dims = []int64{1}
	}
	ids, _ := n.c.emit(n.p.GetName()+":indices", dag.Constant, nil, attrs(dag.Constant, func(a *dag.Attrs) {
		a.Shape, a.OutDType, a.Values = dag.Shape(dims), dag.Int32, vals
	}), nil)
	name, _ := n.c.emit(opHint(n, w.init), dag.Embedding, []string{ids}, attrs(dag.Embedding, func(a *dag.Attrs) {
		a.Num, a.Dim = s.dims[0], s.dims[1]
	}), map[string]string{"weight": w.init})
	n.c.addWeight(w.init)
	out := &value{kind: kAct, dims: append(dims, s.dims[1]), t: name, dtype: dag.Float32, j: -1, prod: -1}
	if len(idx.dims) == 0 { // a scalar index drops the axis
		v, err := n.c.withDims(n.p.GetName(), out, []sym{num(s.dims[1])})
		if err != nil {
			return n.refuse("%v", err)
		}
		out = v
	}
	n.set(0, out)
	return nil
}

func softmaxCrossEntropyOp(n *node) error {
	if err := n.onlyFirstOutput(); err != nil {
		return err
	}
	x, err := n.act(0)
	if err != nil {
		return err
	}
	lab := n.in(1)
	switch {
	case n.in(2) != nil:
		return n.refuse("class weights are not supported")
	case n.attrString("reduction", "mean") != "mean":
		return n.refuse("reduction %q: graphpipe's losses are means over the batch", n.attrString("reduction", "mean"))
	case !x.batchFirst() || len(x.dims) != 2:
		return n.refuse("scores are not [N, classes]")
	case lab.kind != kAct || lab.dtype != dag.Int32 || !lab.batchFirst() || len(lab.dims) != 1:
		return n.refuse("labels %q are not integers [N] fed per sample", n.inName(1))
	}
	classes := x.dims[1]
	if ig := n.attr("ignore_index"); ig != nil && ig.GetI() >= 0 && ig.GetI() < classes {
		return n.refuse("ignore_index %d is a class; graphpipe averages over every sample", ig.GetI())
	}
	n.c.needRange(lab, classes)
	name, _ := n.c.emit(n.p.GetName(), dag.SoftmaxCrossEntropy, []string{x.t, lab.t}, attrs(dag.SoftmaxCrossEntropy, nil), nil)
	n.set(0, &value{kind: kAct, dims: nil, t: name, dtype: dag.Float32, j: -1, prod: -1, a: 1, b: 1})
	n.c.loss = name
	return nil
}
