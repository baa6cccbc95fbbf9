package dag

import (
	"fmt"
	"strings"
)

// Graph is a validated model: shapes inferred, costs known, ops in a
// deterministic topological order. It is immutable.
type Graph struct {
	m         Model
	tensors   map[string]*Tensor
	opIndex   map[string]int
	opInputs  [][]*Tensor // per op, its input tensors in order
	consumers [][]int     // per op, the ops that read its output, ascending, unique
	params    [][]Param
	buffers   [][]Param // per op, its non-trainable state (batch_norm's running statistics)
	costs     []Cost
	order     []int // topological order of op indices
	loss      int
	hash      modelHash // ModelHash's, computed once
}

// Build validates a model and infers every shape and cost. On failure it
// returns Errors, every problem found, one per line.
func Build(m *Model) (*Graph, error) {
	c := &errs{}
	g := &Graph{m: copyModel(m), tensors: map[string]*Tensor{}, opIndex: map[string]int{}, loss: -1}
	if g.m.BatchSize <= 0 {
		c.model("batch_size", "must be a positive integer, got %d", g.m.BatchSize)
	}
	g.declare(c)
	if !g.link(c) {
		return nil, c.err()
	}
	if !g.sort(c) {
		return nil, c.err()
	}
	inferred := g.infer(c)
	if inferred {
		g.checkParamNames(c)
	}
	g.findLoss(c)
	if inferred && g.loss >= 0 {
		g.checkReach(c)
		g.checkTotals(c)
	}
	if err := c.err(); err != nil {
		return nil, err
	}
	return g, nil
}

func copyModel(m *Model) Model {
	out := *m
	out.Version = max(1, m.Version)
	out.Inputs = append([]Input(nil), m.Inputs...)
	for i, in := range out.Inputs {
		out.Inputs[i].Shape = append(Shape{}, in.Shape...)
		if in.Range != nil {
			r := *in.Range
			out.Inputs[i].Range = &r
		}
	}
	out.Ops = append([]Op(nil), m.Ops...)
	for i, op := range out.Ops {
		out.Ops[i].Inputs = append([]string{}, op.Inputs...)
		out.Ops[i].Attrs = op.Attrs.clone()
		if op.ParamNames != nil {
			out.Ops[i].ParamNames = make(map[string]string, len(op.ParamNames))
			for k, v := range op.ParamNames {
				out.Ops[i].ParamNames[k] = v
			}
		}
	}
	return out
}

// clone copies the attributes' slices, so that the copy shares nothing.
func (a Attrs) clone() Attrs {
	for _, s := range []*Shape{&a.OutShape, &a.Kernel, &a.Stride, &a.Padding, &a.Dilation, &a.Shape, &a.Perm, &a.Pads, &a.Axes} {
		if *s != nil {
			*s = append(Shape{}, (*s)...)
		}
	}
	if a.Values != nil {
		a.Values = append([]float64{}, a.Values...)
	}
	return a
}

// checkName reports a name the spec does not allow.
func checkName(name string) string {
	if name == "" {
		return "is empty"
	}
	if len(name) > MaxNameLen {
		return fmt.Sprintf("is %d characters long, at most %d are allowed", len(name), MaxNameLen)
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' || r == '/' || r == ':'
		if !ok {
			return fmt.Sprintf("contains %q; names use letters, digits and ._-/:", r)
		}
	}
	return ""
}

// declare checks names and inputs and registers every input tensor.
func (g *Graph) declare(c *errs) {
	for i := range g.m.Inputs {
		in := &g.m.Inputs[i]
		if msg := checkName(in.Name); msg != "" {
			c.input(in.Name, "name", "%s", msg)
			continue
		}
		if _, dup := g.tensors[in.Name]; dup {
			c.input(in.Name, "name", "is defined twice")
			continue
		}
		checkInput(in, c)
		g.tensors[in.Name] = &Tensor{Name: in.Name, Shape: in.Shape, DType: in.DType, Range: in.Range, Producer: -1}
	}
	for i := range g.m.Ops {
		op := &g.m.Ops[i]
		if msg := checkName(op.Name); msg != "" {
			c.op(op.Name, "name", "%s", msg)
			continue
		}
		if t, dup := g.tensors[op.Name]; dup {
			what := "another op"
			if t.Producer < 0 {
				what = "an input"
			}
			c.op(op.Name, "name", "is also the name of %s", what)
			continue
		}
		g.tensors[op.Name] = &Tensor{Name: op.Name, Producer: i}
		g.opIndex[op.Name] = i
	}
}

func checkInput(in *Input, c *errs) {
	var s sizer
	for i, d := range in.Shape {
		if d <= 0 {
			c.input(in.Name, "shape", "dim %d must be positive, got %d", i, d)
		}
	}
	if s.mul(s.mul(in.Shape...), 4); s.bad {
		c.input(in.Name, "shape", "%v has more elements per sample than int64 can count", in.Shape)
	}
	switch in.DType {
	case Int32:
		if in.Range == nil {
			c.input(in.Name, "range", "required for an int32 input")
		} else if in.Range[0] >= in.Range[1] {
			c.input(in.Name, "range", "[%d, %d) is empty", in.Range[0], in.Range[1])
		} else if in.Range[0] < -1<<31 || in.Range[1] > 1<<31 {
			c.input(in.Name, "range", "[%d, %d) does not fit in int32", in.Range[0], in.Range[1])
		}
	case Float32:
		if in.Range != nil {
			c.input(in.Name, "range", "applies to int32 inputs only")
		}
	default:
		c.input(in.Name, "dtype", `must be "float32" or "int32", got %q`, in.DType)
	}
}

// link checks every op's kind, arity, attributes and references, and records
// its input tensors. It returns false if any reference is broken.
func (g *Graph) link(c *errs) bool {
	linked := true
	g.opInputs = make([][]*Tensor, len(g.m.Ops))
	g.consumers = make([][]int, len(g.m.Ops))
	for i := range g.m.Ops {
		op := &g.m.Ops[i]
		if g.opIndex[op.Name] != i || checkName(op.Name) != "" {
			linked = false // reported by declare
			continue
		}
		info, known := kinds[op.Kind]
		if !known {
			c.op(op.Name, "op", "unknown operator %q (known: %s)", op.Kind, knownKinds(g.version()))
			linked = false
			continue
		}
		if op.Kind.Since() > g.version() {
			c.op(op.Name, "op", "%s is an operator of %s; this model is %s", op.Kind, formatOf(op.Kind.Since()), formatOf(g.version()))
			linked = false
			continue
		}
		checkArity(op, info, c)
		checkAttrs(op, c)
		for _, name := range op.Inputs {
			t, ok := g.tensors[name]
			switch {
			case name == op.Name:
				c.op(op.Name, "inputs", "reads its own output")
				linked = false
			case !ok:
				c.op(op.Name, "inputs", "input %q is not defined", name)
				linked = false
			default:
				g.opInputs[i] = append(g.opInputs[i], t)
				if t.Producer >= 0 {
					g.consumers[t.Producer] = appendUnique(g.consumers[t.Producer], i)
				}
			}
		}
	}
	return linked && len(c.list) == 0
}

func appendUnique(s []int, v int) []int {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}

func checkArity(op *Op, info kindSpec, c *errs) {
	n := len(op.Inputs)
	switch {
	case op.Attrs.HasScalar && n != 1:
		c.op(op.Name, "inputs", "%s with a scalar takes 1 input, got %d", op.Kind, n)
	case op.Attrs.HasScalar:
	case info.maxIn == info.minIn && n != info.minIn:
		c.op(op.Name, "inputs", "%s takes %d input(s), got %d", op.Kind, info.minIn, n)
	case n < info.minIn:
		c.op(op.Name, "inputs", "%s takes at least %d input(s), got %d", op.Kind, info.minIn, n)
	case info.maxIn >= 0 && n > info.maxIn:
		c.op(op.Name, "inputs", "%s takes at most %d input(s), got %d", op.Kind, info.maxIn, n)
	}
}

// infer walks the ops in order, inferring shapes, parameters and costs. An op
// whose inputs failed is skipped, so one problem is reported once.
func (g *Graph) infer(c *errs) bool {
	g.params = make([][]Param, len(g.m.Ops))
	g.buffers = make([][]Param, len(g.m.Ops))
	g.costs = make([]Cost, len(g.m.Ops))
	bad := make([]bool, len(g.m.Ops))
	all := true
	for _, i := range g.order {
		op := &g.m.Ops[i]
		skip := false
		for _, t := range g.opInputs[i] {
			skip = skip || t.Producer >= 0 && bad[t.Producer]
		}
		if skip {
			bad[i], all = true, false
			continue
		}
		shape, dt, rng, ok := infer(op, g.opInputs[i], c, g.version())
		out := g.tensors[op.Name]
		out.Shape, out.DType, out.Range = shape, dt, rng
		if ok {
			ok = g.size(i, c)
		}
		bad[i], all = !ok, all && ok
	}
	return all
}

// size computes an op's parameters and cost, refusing sizes that overflow.
func (g *Graph) size(i int, c *errs) bool {
	op := &g.m.Ops[i]
	out := g.tensors[op.Name]
	var s sizer
	if s.mul(s.mul(out.Shape...), 4); s.bad {
		c.op(op.Name, "shape", "the output %v has more elements per sample than int64 can count", out.Shape)
		return false
	}
	g.params[i], g.buffers[i] = params(op, g.opInputs[i])
	cost, ok := cost(op, g.opInputs[i], out, g.params[i], g.buffers[i])
	if !ok {
		c.op(op.Name, "attrs", "the parameter count or per-sample activation size overflows int64")
		return false
	}
	g.costs[i] = cost
	return true
}

func (g *Graph) findLoss(c *errs) {
	for _, i := range g.order {
		op := &g.m.Ops[i]
		if !op.Kind.IsLoss() {
			continue
		}
		if g.loss >= 0 {
			c.op(op.Name, "op", "is a second loss (%q is one already); a model has exactly one", g.m.Ops[g.loss].Name)
			continue
		}
		g.loss = i
	}
	if g.loss < 0 && len(c.list) == 0 {
		c.model("ops", "no loss: exactly one op must be softmax_cross_entropy, mse or bce_with_logits")
	}
}

// checkReach refuses ops that do not lead to the loss and inputs nobody reads.
func (g *Graph) checkReach(c *errs) {
	live := make([]bool, len(g.m.Ops))
	live[g.loss] = true
	used := map[string]bool{}
	for k := len(g.order) - 1; k >= 0; k-- {
		i := g.order[k]
		if !live[i] {
			continue
		}
		for _, t := range g.opInputs[i] {
			if t.Producer >= 0 {
				live[t.Producer] = true
			} else {
				used[t.Name] = true
			}
		}
	}
	for i := range g.m.Ops {
		if !live[i] {
			c.op(g.m.Ops[i].Name, "", "is not on a path to the loss %q", g.m.Ops[g.loss].Name)
		}
	}
	for _, in := range g.m.Inputs {
		if !used[in.Name] {
			c.input(in.Name, "", "is not used by any op on a path to the loss")
		}
	}
}

// checkTotals refuses a model whose summed sizes overflow int64.
func (g *Graph) checkTotals(c *errs) {
	var s sizer
	var params, stash, out int64
	for _, k := range g.costs {
		params = s.add(params, k.Params)
		stash = s.add(stash, k.StashBytes)
		out = s.add(out, k.OutBytes, k.MemBytes)
	}
	if s.mul(params, 16); s.bad {
		c.model("ops", "the model's parameter count or per-sample activation size overflows int64")
	}
}

// version is the model's format version, 1 or 2.
func (g *Graph) version() int { return max(1, g.m.Version) }

// knownKinds lists the operators of format version v, for a refusal.
func knownKinds(v int) string {
	var names []string
	for _, k := range Kinds() {
		if k.Since() <= v {
			names = append(names, string(k))
		}
	}
	return strings.Join(names, ", ")
}

// checkParamNames checks the ops' parameter and buffer names: every slot a
// name is given for is one of the op's, every name is valid, and no two
// parameters or buffers of the model share one.
func (g *Graph) checkParamNames(c *errs) {
	owner := map[string]string{}
	for i := range g.m.Ops {
		op := &g.m.Ops[i]
		slots := map[string]bool{}
		for _, p := range append(append([]Param(nil), g.params[i]...), g.buffers[i]...) {
			slots[p.Name] = true
			if msg := checkName(p.Key); msg != "" {
				c.op(op.Name, "params."+p.Name, "%q %s", p.Key, msg)
				continue
			}
			if o, dup := owner[p.Key]; dup {
				c.op(op.Name, "params."+p.Name, "%q is also a parameter of op %q; ops do not share parameters", p.Key, o)
				continue
			}
			owner[p.Key] = op.Name
		}
		for slot := range op.ParamNames {
			if !slots[slot] {
				c.op(op.Name, "params."+slot, "%s has no parameter or buffer %q", op.Kind, slot)
			}
		}
	}
}
