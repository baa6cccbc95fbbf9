package onnx

import (
	"fmt"
	"math"

	"github.com/graphpipe/graphpipe/dag"
)

func identity(n *node) error {
	n.set(0, n.in(0))
	return nil
}

func constantOp(n *node) error {
	a := n.p.GetAttribute()
	if len(a) != 1 {
		return n.refuse("has %d attributes, want exactly one value", len(a))
	}
	switch a[0].GetName() {
	case "value":
		s, err := checkTensor(a[0].GetT(), n.c.f.Dir)
		if err != nil {
			return n.refuse("value: %v", err)
		}
		v, err := constFromStored(s)
		if err != nil {
			return n.refuse("value: %v", err)
		}
		n.set(0, v)
	case "value_float":
		n.set(0, floatConst(nil, []float64{float64(a[0].GetF())}))
	case "value_floats":
		f := a[0].GetFloats()
		v := floatConst([]int64{int64(len(f))}, nil)
		for _, x := range f {
			v.floats = append(v.floats, float64(x))
		}
		n.set(0, v)
	case "value_int":
		n.set(0, intConst(nil, []sym{num(a[0].GetI())}))
	case "value_ints":
		is := a[0].GetInts()
		v := intConst([]int64{int64(len(is))}, nil)
		for _, x := range is {
			v.ints = append(v.ints, num(x))
		}
		n.set(0, v)
	default:
		return n.refuse("a constant's %s is not one graphpipe reads", a[0].GetName())
	}
	return nil
}

// constFromStored reads a small tensor as a constant.
func constFromStored(s *stored) (*value, error) {
	if isInt(s.dtype) {
		is, err := s.ints64()
		if err != nil {
			return nil, err
		}
		v := intConst(s.dims, make([]sym, len(is)))
		for k, x := range is {
			v.ints[k] = num(x)
		}
		return v, nil
	}
	fs, err := s.floats()
	return floatConst(s.dims, fs), err
}

func constantOfShape(n *node) error {
	dims, err := n.constInts(0, "shape")
	if err != nil {
		return err
	}
	if _, err := count(dims); err != nil {
		return n.refuse("shape: %v", err)
	}
	fill := floatConst(nil, []float64{0})
	if a := n.attr("value"); a != nil {
		s, err := checkTensor(a.GetT(), n.c.f.Dir)
		if err != nil {
			return n.refuse("value: %v", err)
		}
		if fill, err = constFromStored(s); err != nil || fill.length() != 1 {
			return n.refuse("value must hold one element")
		}
	}
	v, err := gatherConst(fill, dims, func([]int64) int64 { return 0 })
	if err != nil {
		return n.refuse("%v", err)
	}
	n.set(0, v)
	return nil
}

// dimsOf is a value's ONNX dims with the batch as a symbol.
func dimsOf(v *value) []sym {
	if v.kind == kAct {
		return v.symDims()
	}
	out := make([]sym, len(v.dims))
	for i, d := range v.dims {
		out[i] = num(d)
	}
	return out
}

func shapeOp(n *node) error {
	v := n.in(0)
	d := dimsOf(v)
	r := int64(len(d))
	start, end := n.attrInt("start", 0), n.attrInt("end", r)
	clamp := func(x int64) int64 {
		if x < 0 {
			x += r
		}
		return min(max(x, 0), r)
	}
	start, end = clamp(start), clamp(end)
	if end < start {
		end = start
	}
	n.set(0, intConst([]int64{end - start}, append([]sym(nil), d[start:end]...)))
	return nil
}

func sizeOp(n *node) error {
	p := num(1)
	for _, s := range dimsOf(n.in(0)) {
		var ok bool
		if p, ok = p.mul(s); !ok {
			return n.refuse("the size overflows")
		}
	}
	n.set(0, intConst(nil, []sym{p}))
	return nil
}

func castOp(n *node) error {
	to := dtype(n.attrInt("to", 0))
	v := n.in(0)
	if v.kind != kAct {
		cv, ok, err := n.asConst(0)
		if err != nil || !ok {
			return err
		}
		out, err := castConst(cv, isInt(to))
		if err != nil {
			return n.refuse("%v", err)
		}
		n.set(0, out)
		return nil
	}
	switch {
	case (to == tFloat || to == tDouble) && v.dtype == dag.Float32, isInt(to) && v.dtype == dag.Int32:
		n.set(0, v)
		return nil
	case to == tFloat16 || to == tBF16:
		return n.refuse("casts to %s; graphpipe computes in float32 and would not round", to)
	}
	return n.refuse("casts %s activations to %s; graphpipe computes in float32, with integers only as indices and labels", v.dtype, to)
}

// resolveShape is a Reshape's target dims (0 copies an input dim unless
// allowZero, −1 takes what is left), with the batch as a symbol.
func resolveShape(in []sym, target []int64, tsyms []sym, allowZero bool) ([]sym, error) {
	total := num(1)
	for _, s := range in {
		var ok bool
		if total, ok = total.mul(s); !ok {
			return nil, fmt.Errorf("the input's size overflows")
		}
	}
	out := make([]sym, len(tsyms))
	rest, infer := num(1), -1
	for i, s := range tsyms {
		switch {
		case s.n == 0 && s.c == 0 && !allowZero:
			if i >= len(in) {
				return nil, fmt.Errorf("target dim %d copies input dim %d, which does not exist", i, i)
			}
			out[i] = in[i]
		case s.n == 0 && s.c == -1:
			if infer >= 0 {
				return nil, fmt.Errorf("target %v has two −1 dims", target)
			}
			infer = i
			continue
		case s.n == 0 && s.c < 0:
			return nil, fmt.Errorf("target dim %d is %d", i, s.c)
		default:
			out[i] = s
		}
		var ok bool
		if rest, ok = rest.mul(out[i]); !ok {
			return nil, fmt.Errorf("the target's size overflows")
		}
	}
	if infer >= 0 {
		d, ok := total.div(rest)
		if !ok {
			return nil, fmt.Errorf("the −1 dim of target %v does not divide the %v elements", symText(tsyms), total)
		}
		out[infer] = d
	} else if rest != total {
		return nil, fmt.Errorf("target %v holds %v elements, the input %v", symText(tsyms), rest, total)
	}
	return out, nil
}

func symText(s []sym) string { return fmt.Sprint(s) }

func reshapeOp(n *node) error {
	t, ok, err := n.asConst(1)
	if err != nil {
		return err
	}
	if !ok || !t.isInt {
		return n.refuse("the target shape (input 1) is computed from the data; graphpipe needs it known when importing")
	}
	raw := make([]int64, len(t.ints))
	for i, s := range t.ints {
		raw[i] = s.c
	}
	target, err := resolveShape(dimsOf(n.in(0)), raw, t.ints, n.attrInt("allowzero", 0) != 0)
	if err != nil {
		return n.refuse("%v", err)
	}
	return n.reshapeTo(target)
}

// reshapeTo gives input 0 the ONNX dims target (constants, weights and
// activations alike).
func (n *node) reshapeTo(target []sym) error {
	v := n.in(0)
	if v.kind == kAct {
		if v.dtype != dag.Float32 {
			return n.refuse("reshapes integer indices; graphpipe reshapes float32 activations only")
		}
		out, err := n.c.withDims(n.p.GetName(), v, target)
		if err != nil {
			return n.refuse("%v", err)
		}
		n.set(0, out)
		return nil
	}
	cv, _, err := n.asConst(0)
	if err != nil {
		return err
	}
	dims := make([]int64, len(target))
	for i, s := range target {
		if s.n != 0 {
			return n.refuse("a constant cannot take the batch size as a dim")
		}
		dims[i] = s.c
	}
	out := *cv
	out.dims = dims
	n.set(0, &out)
	return nil
}

func flattenOp(n *node) error {
	d := dimsOf(n.in(0))
	ax, err := axisOf(n.attrInt("axis", 1), len(d)+1)
	if err != nil {
		return n.refuse("%v", err)
	}
	outer, inner := num(1), num(1)
	for i, s := range d {
		var ok bool
		if i < ax {
			outer, ok = outer.mul(s)
		} else {
			inner, ok = inner.mul(s)
		}
		if !ok {
			return n.refuse("the size overflows")
		}
	}
	return n.reshapeTo([]sym{outer, inner})
}

// axesOf reads a node's axes from its input 1 (opset 13 on) or attribute.
func (n *node) axesOf(input int) ([]int64, bool, error) {
	if n.in(input) != nil {
		a, err := n.constInts(input, "axes")
		return a, true, err
	}
	a, ok := n.attrInts("axes")
	return a, ok, nil
}

func squeezeOp(n *node) error {
	d := dimsOf(n.in(0))
	axes, given, err := n.axesOf(1)
	if err != nil {
		return err
	}
	drop := make([]bool, len(d))
	for _, a := range axes {
		ax, err := axisOf(a, len(d))
		if err != nil {
			return n.refuse("%v", err)
		}
		if d[ax] != num(1) {
			return n.refuse("squeezes axis %d of size %v", ax, d[ax])
		}
		drop[ax] = true
	}
	var out []sym
	for i, s := range d {
		if !drop[i] && !(!given && s == num(1)) {
			out = append(out, s)
		}
	}
	return n.reshapeTo(out)
}

func unsqueezeOp(n *node) error {
	d := dimsOf(n.in(0))
	axes, _, err := n.axesOf(1)
	if err != nil {
		return err
	}
	r := len(d) + len(axes)
	ins := make([]bool, r)
	for _, a := range axes {
		ax, err := axisOf(a, r)
		if err != nil || ins[ax] {
			return n.refuse("axes %v are not distinct axes of the rank-%d result", axes, r)
		}
		ins[ax] = true
	}
	out := make([]sym, 0, r)
	k := 0
	for i := 0; i < r; i++ {
		if ins[i] {
			out = append(out, num(1))
		} else {
			out = append(out, d[k])
			k++
		}
	}
	return n.reshapeTo(out)
}

func transposeOp(n *node) error {
	v := n.in(0)
	r := len(v.dims)
	perm, ok := n.attrInts("perm")
	if !ok {
		for i := r - 1; i >= 0; i-- {
			perm = append(perm, int64(i))
		}
	}
	switch v.kind {
	case kWeight:
		if v.perm != nil || r != 2 || len(perm) != 2 || perm[0] != 1 {
			return n.refuse("transposes weight %q other than as a matrix's transpose", v.init)
		}
		n.set(0, &value{kind: kWeight, dims: []int64{v.dims[1], v.dims[0]}, init: v.init, perm: perm})
		return nil
	case kConst:
		if len(perm) != r {
			return n.refuse("perm %v does not fit rank %d", perm, r)
		}
		dims := make([]int64, r)
		for i, p := range perm {
			if p < 0 || p >= int64(r) {
				return n.refuse("perm %v is not a permutation", perm)
			}
			dims[i] = v.dims[p]
		}
		st := strides(v.dims)
		out, err := gatherConst(v, dims, func(idx []int64) int64 {
			src := int64(0)
			for i, p := range perm {
				src += idx[i] * st[p]
			}
			return src
		})
		if err != nil {
			return n.refuse("%v", err)
		}
		n.set(0, out)
		return nil
	}
	out, err := n.c.transposed(n.p.GetName(), v, perm)
	if err != nil {
		return n.refuse("%v", err)
	}
	n.set(0, out)
	return nil
}

func concatOp(n *node) error {
	cs, allConst, err := n.allConst()
	if err != nil {
		return err
	}
	if allConst {
		return concatConst(n, cs)
	}
	var xs []*value
	for i := 0; i < n.nIn(); i++ {
		x, err := n.act(i)
		if err != nil {
			return err
		}
		xs = append(xs, x)
	}
	ax, err := axisOf(n.attrInt("axis", 0), len(xs[0].dims))
	if err != nil {
		return n.refuse("%v", err)
	}
	var names []string
	dims := append([]int64(nil), xs[0].dims...)
	dims[ax] = 0
	for _, x := range xs {
		if !sameLayout(x, xs[0]) || len(x.dims) != len(xs[0].dims) {
			return n.refuse("its inputs hold the batch in different places")
		}
		names = append(names, x.t)
		dims[ax] += x.dims[ax]
	}
	sax, err := sampleAxis(xs[0], ax, "the concatenation")
	if err != nil {
		return n.refuse("%v", err)
	}
	if len(xs) == 1 {
		n.set(0, xs[0])
		return nil
	}
	name, _ := n.c.emit(n.p.GetName(), dag.Concat, names, attrs(dag.Concat, func(a *dag.Attrs) { a.Axis = int64(sax) }), nil)
	out := *xs[0]
	out.dims, out.t, out.prod = dims, name, -1
	n.set(0, &out)
	return nil
}

func concatConst(n *node, cs []*value) error {
	var parts []*value
	for _, c := range cs {
		if c != nil {
			parts = append(parts, c)
		}
	}
	r := len(parts[0].dims)
	ax, err := axisOf(n.attrInt("axis", 0), r)
	if err != nil {
		return n.refuse("%v", err)
	}
	dims := append([]int64(nil), parts[0].dims...)
	dims[ax] = 0
	isInt := parts[0].isInt
	for _, p := range parts {
		if len(p.dims) != r || p.isInt != isInt {
			return n.refuse("its constant inputs differ in rank or type")
		}
		dims[ax] += p.dims[ax]
	}
	out := &value{kind: kConst, dims: dims, isInt: isInt}
	outer := int64(1)
	for _, d := range dims[:ax] {
		outer *= d
	}
	for o := int64(0); o < outer; o++ {
		for _, p := range parts {
			inner := int64(1)
			for _, d := range p.dims[ax:] {
				inner *= d
			}
			lo, hi := o*inner, (o+1)*inner
			if isInt {
				out.ints = append(out.ints, p.ints[lo:hi]...)
			} else {
				out.floats = append(out.floats, p.floats[lo:hi]...)
			}
		}
	}
	n.set(0, out)
	return nil
}

func gatherOp(n *node) error {
	data, idx := n.in(0), n.in(1)
	switch {
	case data.kind == kWeight && idx.kind == kAct:
		return embeddingOp(n)
	case data.kind == kAct:
		return gatherAct(n)
	case data.kind == kWeight && isFloat(n.c.f.inits[data.init].dtype) && len(data.dims) == 2 && n.attrInt("axis", 0) == 0:
		return embeddingOfConst(n) // rows of a trainable table at known indices
	}
	cs, ok, err := n.allConst()
	if err != nil || !ok {
		if err == nil {
			err = n.refuse("gathers with indices computed from the data")
		}
		return err
	}
	return gatherConstOp(n, cs[0], cs[1])
}

func gatherConstOp(n *node, data, idx *value) error {
	r := len(data.dims)
	ax, err := axisOf(n.attrInt("axis", 0), r)
	if err != nil {
		return n.refuse("%v", err)
	}
	ids := make([]int64, idx.length())
	for k := range ids {
		f, ok := idx.at(k)
		if !ok || !idx.isInt {
			return n.refuse("gathers at an index that is not a known integer")
		}
		ids[k] = int64(f)
		if ids[k] < 0 {
			ids[k] += data.dims[ax]
		}
		if ids[k] < 0 || ids[k] >= data.dims[ax] {
			return n.refuse("index %d is out of range for axis %d of %d", int64(f), ax, data.dims[ax])
		}
	}
	dims := append(append(append([]int64(nil), data.dims[:ax]...), idx.dims...), data.dims[ax+1:]...)
	st := strides(data.dims)
	ist := strides(idx.dims)
	q := len(idx.dims)
	out, err := gatherConst(data, dims, func(o []int64) int64 {
		src := int64(0)
		for i := 0; i < ax; i++ {
			src += o[i] * st[i]
		}
		k := int64(0)
		for i := 0; i < q; i++ {
			k += o[ax+i] * ist[i]
		}
		src += ids[k] * st[ax]
		for i := ax + 1; i < r; i++ {
			src += o[q+i-1] * st[i]
		}
		return src
	})
	if err != nil {
		return n.refuse("%v", err)
	}
	n.set(0, out)
	return nil
}

// gatherAct takes constant indices of an activation: a slice (and a
// reshape dropping the axis, for a scalar index).
func gatherAct(n *node) error {
	x := n.in(0)
	if x.dtype != dag.Float32 {
		return n.refuse("gathers from integer activations")
	}
	idx, ok, err := n.asConst(1)
	if err != nil {
		return err
	}
	if !ok || !idx.isInt {
		return n.refuse("gathers from an activation at indices computed from the data")
	}
	ax, err := axisOf(n.attrInt("axis", 0), len(x.dims))
	if err != nil {
		return n.refuse("%v", err)
	}
	if len(idx.dims) > 1 {
		return n.refuse("gathers with indices of rank %d", len(idx.dims))
	}
	first, _ := idx.at(0)
	lo := int64(first)
	if lo < 0 {
		lo += x.dims[ax]
	}
	for k := 1; k < idx.length(); k++ {
		f, _ := idx.at(k)
		if int64(f) != lo+int64(k) {
			return n.refuse("gathers indices that are not a consecutive run; graphpipe takes those as a slice")
		}
	}
	out, err := n.c.sliceAct(n.p.GetName(), x, ax, lo, lo+int64(idx.length()), 1)
	if err != nil {
		return n.refuse("%v", err)
	}
	if len(idx.dims) == 0 { // a scalar index drops the axis
		d := out.symDims()
		out, err = n.c.withDims(n.p.GetName(), out, append(d[:ax:ax], d[ax+1:]...))
		if err != nil {
			return n.refuse("%v", err)
		}
	}
	n.set(0, out)
	return nil
}

// sliceAct slices ONNX axis ax of activation x to [start, end) by step.
func (c *converter) sliceAct(hint string, x *value, ax int, start, end, step int64) (*value, error) {
	first, cnt := dag.SliceRange(x.dims[ax], start, end, step)
	if ax == x.j {
		if first == 0 && cnt == x.dims[ax] && step == 1 && end >= math.MaxInt32 {
			return x, nil // the whole batch
		}
		return nil, fmt.Errorf("slices axis %d, which holds the batch", ax)
	}
	if cnt < 1 {
		return nil, fmt.Errorf("the slice [%d:%d:%d] of axis %d (of %d) is empty", start, end, step, ax, x.dims[ax])
	}
	if first == 0 && cnt == x.dims[ax] && step == 1 {
		return x, nil
	}
	sax, _ := sampleAxis(x, ax, "")
	name, _ := c.emit(hint, dag.Slice, []string{x.t}, attrs(dag.Slice, func(a *dag.Attrs) {
		a.Axis, a.Start, a.End, a.Step = int64(sax), first, first+(cnt-1)*step+1, step
	}), nil)
	out := *x
	out.dims = append([]int64(nil), x.dims...)
	out.dims[ax] = cnt
	out.t, out.prod = name, -1
	return &out, nil
}

func sliceOp(n *node) error {
	starts, err := n.constInts(1, "starts")
	if err != nil {
		return err
	}
	ends, err := n.constInts(2, "ends")
	if err != nil {
		return err
	}
	x := n.in(0)
	r := len(x.dims)
	axes := make([]int64, len(starts))
	for i := range axes {
		axes[i] = int64(i)
	}
	if n.in(3) != nil {
		if axes, err = n.constInts(3, "axes"); err != nil {
			return err
		}
	}
	steps := make([]int64, len(starts))
	for i := range steps {
		steps[i] = 1
	}
	if n.in(4) != nil {
		if steps, err = n.constInts(4, "steps"); err != nil {
			return err
		}
	}
	if len(ends) != len(starts) || len(axes) != len(starts) || len(steps) != len(starts) {
		return n.refuse("starts, ends, axes and steps differ in length")
	}
	if x.kind != kAct {
		return sliceConst(n, starts, ends, axes, steps)
	}
	out := x
	for i := range starts {
		ax, err := axisOf(axes[i], r)
		if err != nil {
			return n.refuse("%v", err)
		}
		if steps[i] < 1 {
			return n.refuse("step %d on axis %d: graphpipe slices forwards only", steps[i], ax)
		}
		if out, err = n.c.sliceAct(n.p.GetName(), out, ax, starts[i], ends[i], steps[i]); err != nil {
			return n.refuse("%v", err)
		}
	}
	n.set(0, out)
	return nil
}

func sliceConst(n *node, starts, ends, axes, steps []int64) error {
	cv, _, err := n.asConst(0)
	if err != nil {
		return err
	}
	first := make([]int64, len(cv.dims))
	step := make([]int64, len(cv.dims))
	dims := append([]int64(nil), cv.dims...)
	for i := range step {
		step[i] = 1
	}
	for i := range starts {
		ax, err := axisOf(axes[i], len(dims))
		if err != nil {
			return n.refuse("%v", err)
		}
		if steps[i] < 1 {
			return n.refuse("step %d: graphpipe slices forwards only", steps[i])
		}
		first[ax], dims[ax] = dag.SliceRange(cv.dims[ax], starts[i], ends[i], steps[i])
		step[ax] = steps[i]
	}
	st := strides(cv.dims)
	out, err := gatherConst(cv, dims, func(o []int64) int64 {
		src := int64(0)
		for i := range o {
			src += (first[i] + o[i]*step[i]) * st[i]
		}
		return src
	})
	if err != nil {
		return n.refuse("%v", err)
	}
	n.set(0, out)
	return nil
}

func splitOp(n *node) error {
	x := n.in(0)
	ax, err := axisOf(n.attrInt("axis", 0), len(x.dims))
	if err != nil {
		return n.refuse("%v", err)
	}
	parts, ok := n.attrInts("split")
	if n.in(1) != nil {
		if parts, err = n.constInts(1, "split"); err != nil {
			return err
		}
		ok = true
	}
	outs := len(n.p.GetOutput())
	if ax == x.j && x.kind == kAct {
		return n.refuse("splits axis %d, which holds the batch", ax)
	}
	if !ok {
		d := x.dims[ax]
		if ax == x.j || d%int64(outs) != 0 {
			return n.refuse("axis %d of %d does not split into %d equal parts", ax, d, outs)
		}
		for i := 0; i < outs; i++ {
			parts = append(parts, d/int64(outs))
		}
	}
	if len(parts) != outs {
		return n.refuse("%d split sizes for %d outputs", len(parts), outs)
	}
	at := int64(0)
	for i, p := range parts {
		if !n.outUsed(i) && x.kind == kAct {
			at += p
			continue
		}
		var err error
		var out *value
		if x.kind == kAct {
			out, err = n.c.sliceAct(fmt.Sprintf("%s:%d", n.p.GetName(), i), x, ax, at, at+p, 1)
		} else {
			out, err = splitConst(n, ax, at, at+p)
		}
		if err != nil {
			return n.refuse("%v", err)
		}
		n.set(i, out)
		at += p
	}
	if at != x.dims[ax] && ax != x.j {
		return n.refuse("split sizes %v do not add up to axis %d's %d", parts, ax, x.dims[ax])
	}
	return nil
}

func splitConst(n *node, ax int, lo, hi int64) (*value, error) {
	cv, _, err := n.asConst(0)
	if err != nil {
		return nil, err
	}
	dims := append([]int64(nil), cv.dims...)
	dims[ax] = hi - lo
	st := strides(cv.dims)
	return gatherConst(cv, dims, func(o []int64) int64 {
		src := int64(0)
		for i := range o {
			k := o[i]
			if i == ax {
				k += lo
			}
			src += k * st[i]
		}
		return src
	})
}

func expandOp(n *node) error {
	shape, err := n.constIntsSym(1, "shape")
	if err != nil {
		return err
	}
	x := n.in(0)
	if x.kind == kWeight && overBatch(shape) { // a weight given the batch (ViT's class token): a parameter op
		if x, err = n.operand(0); err != nil {
			return err
		}
	}
	if x.kind != kAct {
		cv, _, err := n.asConst(0)
		if err != nil {
			return err
		}
		dims := make([]int64, len(shape))
		for i, s := range shape {
			if s.n != 0 {
				return n.refuse("expands a constant over the batch")
			}
			dims[i] = s.c
		}
		out, err := broadcastDims(cv.dims, dims)
		if err != nil {
			return n.refuse("%v", err)
		}
		v, err := gatherConst(cv, out, func(o []int64) int64 {
			k := int64(0)
			st := strides(out)
			for i := range o {
				k += o[i] * st[i]
			}
			return int64(bindex(out, cv.dims, int(k)))
		})
		if err != nil {
			return n.refuse("%v", err)
		}
		n.set(0, v)
		return nil
	}
	// an activation: only a broadcast over the batch itself is free
	d := x.symDims()
	if len(shape) > len(d) {
		return n.refuse("expands to a higher rank")
	}
	for i := range shape {
		k := len(d) - len(shape) + i
		if shape[i] != num(1) && shape[i] != d[k] && !(x.j < 0 && shape[i].n == 1) {
			return n.refuse("expands axis %d from %v to %v; graphpipe broadcasts in the op that reads it instead", k, d[k], shape[i])
		}
	}
	if x.j < 0 { // a per-sample constant given its batch axis
		for i, s := range shape {
			k := len(d) - len(shape) + i
			if s.n == 1 && x.dims[k] == 1 {
				out := *x
				out.j, out.a, out.b = k, 1, 1
				out.t = n.c.materialize(n.p.GetName(), x.t, x.canon(), out.canon())
				n.set(0, &out)
				return nil
			}
		}
	}
	n.set(0, x)
	return nil
}

// overBatch says a shape holds the batch size.
func overBatch(shape []sym) bool {
	for _, s := range shape {
		if s.n != 0 {
			return true
		}
	}
	return false
}

// constIntsSym reads input i as constant integers that may hold the batch.
func (n *node) constIntsSym(i int, what string) ([]sym, error) {
	v, ok, err := n.asConst(i)
	if err != nil {
		return nil, err
	}
	if !ok || !v.isInt {
		return nil, n.refuse("%s (input %d) must be integers known when importing", what, i)
	}
	return v.ints, nil
}

func rangeOp(n *node) error {
	cs, ok, err := n.allConst()
	if err != nil || !ok {
		if err == nil {
			err = n.refuse("a range computed from the data")
		}
		return err
	}
	var v [3]float64
	for i := range v {
		f, ok := cs[i].at(0)
		if !ok || cs[i].length() != 1 {
			return n.refuse("input %d is not a known scalar", i)
		}
		v[i] = f
	}
	if v[2] == 0 {
		return n.refuse("delta is 0")
	}
	cnt := int64(math.Max(math.Ceil((v[1]-v[0])/v[2]), 0))
	if cnt > maxFolded {
		return n.refuse("the range is too long")
	}
	out := &value{kind: kConst, dims: []int64{cnt}, isInt: cs[0].isInt}
	for k := int64(0); k < cnt; k++ {
		x := v[0] + float64(k)*v[2]
		if out.isInt {
			out.ints = append(out.ints, num(int64(x)))
		} else {
			out.floats = append(out.floats, x)
		}
	}
	n.set(0, out)
	return nil
}

func whereOp(n *node) error {
	cs, ok, err := n.allConst()
	if err != nil || !ok {
		if err == nil {
			err = n.refuse("selects between activations (Where); graphpipe has no such op")
		}
		return err
	}
	dims, err := broadcastDims(cs[0].dims, cs[1].dims)
	if err == nil {
		dims, err = broadcastDims(dims, cs[2].dims)
	}
	if err != nil {
		return n.refuse("%v", err)
	}
	if cs[1].isInt != cs[2].isInt {
		return n.refuse("its branches differ in type")
	}
	cnt, _ := count(dims)
	out := &value{kind: kConst, dims: dims, isInt: cs[1].isInt}
	for k := 0; k < int(cnt); k++ {
		cond, _ := cs[0].at(bindex(dims, cs[0].dims, k))
		src := cs[2]
		if cond != 0 {
			src = cs[1]
		}
		j := bindex(dims, src.dims, k)
		if out.isInt {
			out.ints = append(out.ints, src.ints[j])
		} else {
			out.floats = append(out.floats, src.floats[j])
		}
	}
	n.set(0, out)
	return nil
}

func padOp(n *node) error {
	if mode := n.attrString("mode", "constant"); mode != "constant" {
		return n.refuse("mode %q: graphpipe pads with a constant", mode)
	}
	x, err := n.act(0)
	if err != nil {
		return err
	}
	pads, err := n.constInts(1, "pads")
	if err != nil {
		return err
	}
	r := len(x.dims)
	axes := make([]int64, r)
	for i := range axes {
		axes[i] = int64(i)
	}
	if n.in(3) != nil {
		if axes, err = n.constInts(3, "axes"); err != nil {
			return err
		}
	}
	if len(pads) != 2*len(axes) {
		return n.refuse("%d pads for %d axes", len(pads), len(axes))
	}
	value := 0.0
	if n.in(2) != nil {
		cv, ok, err := n.asConst(2)
		if err != nil {
			return err
		}
		s, isScalar := cv.scalar()
		if !ok || !isScalar {
			return n.refuse("its constant_value is not a known scalar")
		}
		value = s
	}
	rc := len(x.canon())
	cp := make(dag.Shape, 2*rc)
	out := *x
	out.dims = append([]int64(nil), x.dims...)
	any := false
	for k, a := range axes {
		ax, err := axisOf(a, r)
		if err != nil {
			return n.refuse("%v", err)
		}
		lo, hi := pads[k], pads[len(axes)+k]
		if lo == 0 && hi == 0 {
			continue
		}
		if lo < 0 || hi < 0 {
			return n.refuse("negative pads %d, %d crop; graphpipe pads only", lo, hi)
		}
		sax, err := sampleAxis(x, ax, "the padding")
		if err != nil {
			return n.refuse("%v", err)
		}
		cp[sax], cp[rc+sax] = lo, hi
		out.dims[ax] += lo + hi
		any = true
	}
	if !any {
		n.set(0, x)
		return nil
	}
	name, _ := n.c.emit(n.p.GetName(), dag.Pad, []string{x.t}, attrs(dag.Pad, func(a *dag.Attrs) { a.Pads, a.PadValue = cp, value }), nil)
	out.t, out.prod = name, -1
	n.set(0, &out)
	return nil
}
