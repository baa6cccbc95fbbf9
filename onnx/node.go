package onnx

import (
	"fmt"
	"strings"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/onnx/onnxpb"
)

// node is the node being converted, with helpers for its inputs and
// attributes.
type node struct {
	c *converter
	p *onnxpb.NodeProto
}

// refuse is how a handler says it cannot take the node.
func (n *node) refuse(format string, args ...any) error {
	return &NodeError{Node: n.p.GetName(), OpType: n.p.GetOpType(), Domain: n.p.GetDomain(), Opset: n.c.f.Opset, Msg: fmt.Sprintf(format, args...)}
}

// handler converts one op type.
type handler func(n *node) error

// node converts one node.
func (c *converter) node(p *onnxpb.NodeProto) error {
	n := &node{c: c, p: p}
	if c.folded[p] {
		return nil // part of a pattern its last node converts
	}
	if f, ok := c.fused[p]; ok {
		first := len(c.ops)
		if err := f.emit(n); err != nil {
			return err
		}
		return n.checkEmitted(first)
	}
	if d := p.GetDomain(); d != "" && d != "ai.onnx" {
		return n.opaqueOr("op type %s of domain %q is not one graphpipe reads", p.GetOpType(), d)
	}
	spec, ok := ops[p.GetOpType()]
	if !ok {
		return n.opaqueOr("op type %s is not one graphpipe reads", p.GetOpType())
	}
	if !spec.reads(c.f.Opset) {
		return n.opaqueOr("graphpipe reads op type %s in opsets %d to %d, not %d", p.GetOpType(), spec.opsets[0], spec.opsets[1], c.f.Opset)
	}
	for _, a := range p.GetAttribute() {
		if a.GetType() == onnxpb.AttributeProto_GRAPH || a.GetType() == onnxpb.AttributeProto_GRAPHS {
			return n.opaqueOr("it holds a subgraph (%s), which graphpipe does not run", a.GetName())
		}
	}
	if a := n.unknownAttr(spec.attrs); a != "" {
		return n.opaqueOr("attribute %q is not one graphpipe knows for %s", a, p.GetOpType())
	}
	for i, in := range p.GetInput() {
		if in != "" && c.vals[in] == nil {
			return n.refuse("input %d %q is neither a graph input, an initializer nor another node's output", i, in)
		}
	}
	first := len(c.ops)
	if err := spec.handle(n); err != nil {
		return err
	}
	return n.checkEmitted(first)
}

// in is input i's value; nil when the input is absent (optional).
func (n *node) in(i int) *value {
	ins := n.p.GetInput()
	if i >= len(ins) || ins[i] == "" {
		return nil
	}
	return n.c.vals[ins[i]]
}

func (n *node) inName(i int) string { return n.p.GetInput()[i] }

// nIn is the number of inputs given (trailing absent ones left out).
func (n *node) nIn() int {
	k := len(n.p.GetInput())
	for k > 0 && n.p.GetInput()[k-1] == "" {
		k--
	}
	return k
}

// act is input i as an activation.
func (n *node) act(i int) (*value, error) {
	v := n.in(i)
	switch {
	case v == nil:
		return nil, n.refuse("input %d is missing", i)
	case v.kind != kAct:
		return nil, n.refuse("input %d %q is a constant or a weight where graphpipe needs an activation", i, n.inName(i))
	case v.dtype != "float32":
		return nil, n.refuse("input %d %q holds integers; graphpipe computes this op on float32 only", i, n.inName(i))
	}
	return v, nil
}

// set makes output i the value v.
func (n *node) set(i int, v *value) {
	if v.from == "" {
		v.from = n.p.GetName()
	}
	if i < len(n.p.GetOutput()) && n.p.GetOutput()[i] != "" {
		n.c.vals[n.p.GetOutput()[i]] = v
	}
}

// outUsed reports whether output i is read by a node the trained output needs.
func (n *node) outUsed(i int) bool {
	outs := n.p.GetOutput()
	return i < len(outs) && outs[i] != "" && n.c.uses[outs[i]] > 0
}

// onlyFirstOutput refuses a node whose extra outputs (a mask, indices,
// statistics) something reads.
func (n *node) onlyFirstOutput() error {
	for i := 1; i < len(n.p.GetOutput()); i++ {
		if n.outUsed(i) {
			return n.refuse("its output %d %q is read; graphpipe computes only the first output", i, n.p.GetOutput()[i])
		}
	}
	return nil
}

func (n *node) attr(name string) *onnxpb.AttributeProto {
	for _, a := range n.p.GetAttribute() {
		if a.GetName() == name {
			return a
		}
	}
	return nil
}

func (n *node) attrInt(name string, def int64) int64 {
	if a := n.attr(name); a != nil {
		return a.GetI()
	}
	return def
}

func (n *node) attrFloat(name string, def float64) float64 {
	if a := n.attr(name); a != nil {
		return float64(a.GetF())
	}
	return def
}

func (n *node) attrInts(name string) ([]int64, bool) {
	if a := n.attr(name); a != nil {
		return a.GetInts(), true
	}
	return nil, false
}

func (n *node) attrString(name, def string) string {
	if a := n.attr(name); a != nil {
		return string(a.GetS())
	}
	return def
}

// constInts reads input i as a constant integer list (axes, pads, shapes
// without the batch).
func (n *node) constInts(i int, what string) ([]int64, error) {
	v := n.in(i)
	if v == nil {
		return nil, n.refuse("%s (input %d) is missing", what, i)
	}
	if v.kind == kWeight {
		cv, err := n.c.readConst(v)
		if err != nil {
			return nil, n.refuse("%s (input %d %q): %v", what, i, n.inName(i), err)
		}
		v = cv
	}
	if v.kind != kConst || !v.isInt {
		return nil, n.refuse("%s (input %d %q) must be integers known when importing; it is computed from the data", what, i, n.inName(i))
	}
	out := make([]int64, len(v.ints))
	for k, s := range v.ints {
		if s.n != 0 {
			return nil, n.refuse("%s (input %d %q) depends on the batch size", what, i, n.inName(i))
		}
		out[k] = s.c
	}
	return out, nil
}

// readConst reads an initializer as a constant.
func (c *converter) readConst(v *value) (*value, error) {
	s := c.f.inits[v.init]
	if v.perm != nil {
		return nil, fmt.Errorf("a transposed weight cannot be read as a constant")
	}
	cv := &value{kind: kConst, dims: s.dims, weight: v.init}
	if isInt(s.dtype) {
		is, err := s.ints64()
		if err != nil {
			return nil, err
		}
		cv.isInt = true
		for _, x := range is {
			cv.ints = append(cv.ints, num(x))
		}
		return cv, nil
	}
	fs, err := s.floats()
	cv.floats = fs
	return cv, err
}

// opaqueOr refuses a node the importer cannot take, or, with AllowOpaque,
// makes it an opaque op priced from its shapes.
func (n *node) opaqueOr(format string, args ...any) error {
	if !n.c.o.AllowOpaque {
		return n.refuse(format, args...)
	}
	return n.opaque(fmt.Sprintf(format, args...))
}

// opaque makes the node an opaque op: its output's shape from the graph's
// value_info (the exporter's shape inference), its FLOPs one per element
// read or written, its parameters the elements of the weights it reads.
func (n *node) opaque(why string) error {
	c := n.c
	out := n.p.GetOutput()
	if len(out) == 0 {
		return n.refuse("%s, and it has no output", why)
	}
	if n.onlyFirstOutput() != nil {
		return n.refuse("%s, and more than one of its outputs is read", why)
	}
	shape, dt, ok := c.valueInfo(out[0])
	if !ok {
		return n.refuse("%s (--allow-opaque needs its output's shape, which the file's value_info does not give)", why)
	}
	var inputs []string
	var flops float64
	var params int64
	for i := 0; i < n.nIn(); i++ {
		v := n.in(i)
		switch {
		case v == nil:
		case v.kind == kAct:
			inputs = append(inputs, v.t)
			flops += float64(v.elems())
		case v.kind == kWeight:
			params += c.f.inits[v.init].n
		}
	}
	flops += float64(dag.Shape(shape).Elems())
	odt := "float32"
	if dt == "int32" {
		odt = "int32"
	}
	name, _ := c.emit(n.p.GetName(), "opaque", inputs, attrs("opaque", func(a *dag.Attrs) {
		a.OutShape, a.FlopsFwd, a.FlopsBwd, a.Params, a.OutDType = dag.Shape(shape), flops, 2*flops, params, dag.DType(odt)
	}), nil)
	n.set(0, &value{kind: kAct, dims: append([]int64{1}, shape...), t: name, dtype: dag.DType(odt), j: 0, a: 1, b: 1, prod: -1})
	c.notes = append(c.notes, fmt.Sprintf("node %q (%s) is an opaque op: %s", n.p.GetName(), n.p.GetOpType(), why))
	return nil
}

// valueInfo finds a value's per-sample shape in the graph's value_info or
// outputs (batch first).
func (c *converter) valueInfo(name string) ([]int64, string, bool) {
	g := c.f.Model.Graph
	for _, list := range [][]*onnxpb.ValueInfoProto{g.GetValueInfo(), g.GetOutput()} {
		for _, vi := range list {
			if vi.GetName() != name || vi.GetType().GetTensorType().GetShape() == nil {
				continue
			}
			dims := vi.GetType().GetTensorType().GetShape().GetDim()
			if len(dims) == 0 {
				return nil, "", false
			}
			var shape []int64
			for _, d := range dims[1:] {
				if d.GetDimValue() <= 0 {
					return nil, "", false
				}
				shape = append(shape, d.GetDimValue())
			}
			dt := "float32"
			if isInt(dtype(vi.GetType().GetTensorType().GetElemType())) {
				dt = "int32"
			}
			return shape, dt, true
		}
	}
	return nil, "", false
}

func joinInts(v []int64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return "[" + strings.Join(s, ", ") + "]"
}
