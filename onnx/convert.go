package onnx

import (
	"fmt"
	"sort"
	"strings"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/onnx/onnxpb"
)

// Options say how to import a graph.
type Options struct {
	// Loss appends a loss to a graph that outputs predictions:
	// softmax_cross_entropy, mse or bce_with_logits; "" keeps a graph that
	// ends in a loss (SoftmaxCrossEntropyLoss) as it is.
	Loss dag.Kind
	// Label names the label (target) input a loss appends; "label" by default.
	Label string
	// Batch is the model's batch_size; 0: the graph input's fixed batch
	// dim, or 32 when it is symbolic.
	Batch int64
	// Output picks the graph output to train; "" takes the first.
	Output string
	// AllowOpaque turns nodes the importer cannot take into opaque ops
	// priced from their shapes, instead of refusing the model.
	AllowOpaque bool
	// Name is the model's name; "" takes the graph's.
	Name string
}

// Weight is an initial value the model needs: a parameter or buffer, under
// its name, read from an initializer.
type Weight struct {
	Name  string
	Shape []int64
	src   *stored
}

// Result is an imported model.
type Result struct {
	Model   *dag.Model
	Weights []Weight
	Notes   []string // what the import changed or assumed, for people
}

// converter walks a graph's nodes in order, building graphpipe ops.
type converter struct {
	f        *File
	o        Options
	vals     map[string]*value // ONNX value name → what it is
	ops      []dag.Op
	inputs   []dag.Input
	names    map[string]bool   // graphpipe names taken
	owner    map[string]string // initializer → the op that holds it as a parameter
	weights  []Weight
	problems Errors
	notes    []string
	uses     map[string]int // ONNX value → nodes of the needed graph that read it
	ranges   map[string]*[2]int64
	loss     string // the graph's own loss op, if it has one
	// patterns: nodes folded into a recognised op (skipped), and the node
	// that stands for each pattern with the op it becomes
	folded map[*onnxpb.NodeProto]bool
	fused  map[*onnxpb.NodeProto]fusion
}

// Import converts a checked model into a graphpipe/model@2 model and its
// weights.
func Import(f *File, o Options) (*Result, error) {
	if o.Label == "" {
		o.Label = "label"
	}
	c := &converter{f: f, o: o, vals: map[string]*value{}, names: map[string]bool{}, owner: map[string]string{},
		uses: map[string]int{}, ranges: map[string]*[2]int64{}, folded: map[*onnxpb.NodeProto]bool{}, fused: map[*onnxpb.NodeProto]fusion{}}
	return c.run()
}

func (c *converter) run() (*Result, error) {
	g := c.f.Model.Graph
	out, err := c.pickOutput()
	if err != nil {
		return nil, err
	}
	nodes, err := c.needed(out)
	if err != nil {
		return nil, err
	}
	for k, s := range c.f.inits {
		c.vals[k] = &value{kind: kWeight, dims: s.dims, init: k}
	}
	batch, err := c.graphInputs(nodes)
	if err != nil {
		return nil, err
	}
	c.patterns(nodes)
	bad := map[string]bool{} // values a failed node should have made
	for _, n := range nodes {
		if c.skip(n, bad) {
			continue
		}
		if err := c.node(n); err != nil {
			c.problems = append(c.problems, err)
			for _, o := range n.GetOutput() {
				bad[o] = true
			}
		}
	}
	if len(c.problems) > 0 {
		return nil, c.problems
	}
	if err := c.finish(out); err != nil {
		return nil, err
	}
	c.setRanges()
	m := &dag.Model{Version: 2, Name: c.modelName(g), BatchSize: batch, Inputs: c.inputs, Ops: c.ops}
	if _, err := dag.Build(m); err != nil {
		return nil, fmt.Errorf("the imported model does not validate (a bug in the importer or a graph it cannot express): %w", err)
	}
	return &Result{Model: m, Weights: c.weights, Notes: c.notes}, nil
}

// skip reports a node whose inputs a failed node should have made, so that
// one problem is reported once.
func (c *converter) skip(n *onnxpb.NodeProto, bad map[string]bool) bool {
	for _, in := range n.GetInput() {
		if bad[in] {
			for _, o := range n.GetOutput() {
				bad[o] = true
			}
			return true
		}
	}
	return false
}

func (c *converter) modelName(g *onnxpb.GraphProto) string {
	if c.o.Name != "" {
		return c.o.Name
	}
	if g.GetName() != "" {
		return g.GetName()
	}
	return "imported"
}

// pickOutput chooses the graph output to train.
func (c *converter) pickOutput() (string, error) {
	outs := c.f.Model.Graph.GetOutput()
	if c.o.Output == "" {
		if len(outs) > 1 {
			var names []string
			for _, o := range outs[1:] {
				names = append(names, o.GetName())
			}
			c.notes = append(c.notes, fmt.Sprintf("trains output %q; the graph's other outputs (%s) are left out (--output picks another)", outs[0].GetName(), strings.Join(names, ", ")))
		}
		return outs[0].GetName(), c.outputType(outs[0])
	}
	for _, o := range outs {
		if o.GetName() == c.o.Output {
			return o.GetName(), c.outputType(o)
		}
	}
	var names []string
	for _, o := range outs {
		names = append(names, o.GetName())
	}
	return "", fileErrf("--output", "the graph has no output %q (it has %s)", c.o.Output, strings.Join(names, ", "))
}

// needed is the nodes the output depends on, in a topological order (the
// file's order where it is one): the rest is dead for training.
func (c *converter) needed(out string) ([]*onnxpb.NodeProto, error) {
	g := c.f.Model.Graph
	prod := map[string]int{}
	for i, n := range g.GetNode() {
		for _, o := range n.GetOutput() {
			if o == "" {
				continue
			}
			if j, dup := prod[o]; dup {
				return nil, &NodeError{Node: nodeName(n, i), OpType: n.GetOpType(), Domain: n.GetDomain(), Opset: c.f.Opset,
					Msg: fmt.Sprintf("output %q is also produced by node %q", o, nodeName(g.GetNode()[j], j))}
			}
			prod[o] = i
		}
	}
	if _, ok := prod[out]; !ok && c.f.inits[out] == nil && !isGraphInput(g, out) {
		return nil, fileErrf(fmt.Sprintf("graph.output[%q]", out), "no node produces it")
	}
	live := map[int]bool{}
	stack := []string{out}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		i, ok := prod[v]
		if !ok || live[i] {
			continue
		}
		live[i] = true
		for _, in := range g.GetNode()[i].GetInput() {
			if in != "" {
				stack = append(stack, in)
			}
		}
	}
	c.uses[out]++ // the trained output is read, by the loss
	return c.order(live, prod)
}

func isGraphInput(g *onnxpb.GraphProto, name string) bool {
	for _, in := range g.GetInput() {
		if in.GetName() == name {
			return true
		}
	}
	return false
}

// order sorts the live nodes topologically (Kahn, ties by file position)
// and reports a cycle by its nodes.
func (c *converter) order(live map[int]bool, prod map[string]int) ([]*onnxpb.NodeProto, error) {
	g := c.f.Model.Graph
	indeg := map[int]int{}
	next := map[int][]int{}
	for i := range live {
		for _, in := range g.GetNode()[i].GetInput() {
			if j, ok := prod[in]; ok && live[j] {
				indeg[i]++
				next[j] = append(next[j], i)
			}
			if in != "" {
				c.uses[in]++
			}
		}
	}
	var ready, out []int
	for i := range live {
		if indeg[i] == 0 {
			ready = append(ready, i)
		}
	}
	for len(ready) > 0 {
		sort.Ints(ready)
		i := ready[0]
		ready = ready[1:]
		out = append(out, i)
		for _, j := range next[i] {
			if indeg[j]--; indeg[j] == 0 {
				ready = append(ready, j)
			}
		}
	}
	if len(out) < len(live) {
		var cyc []string
		for i := range live {
			if indeg[i] > 0 {
				cyc = append(cyc, fmt.Sprintf("%q", nodeName(g.GetNode()[i], i)))
			}
		}
		sort.Strings(cyc)
		return nil, fileErrf("graph.node", "nodes %s form a cycle", strings.Join(cyc, ", "))
	}
	nodes := make([]*onnxpb.NodeProto, len(out))
	for k, i := range out {
		nodes[k] = g.GetNode()[i]
		if nodes[k].GetName() == "" {
			nodes[k].Name = ptr(nodeName(nodes[k], i))
		}
	}
	return nodes, nil
}

func ptr[T any](v T) *T { return &v }

// nodeName names a node for messages: its name, or its type, position and
// first output.
func nodeName(n *onnxpb.NodeProto, i int) string {
	if n.GetName() != "" {
		return n.GetName()
	}
	out := ""
	if len(n.GetOutput()) > 0 {
		out = n.GetOutput()[0]
	}
	return fmt.Sprintf("%s_%d:%s", n.GetOpType(), i, out)
}

// name makes a unique graphpipe name from an ONNX one.
func (c *converter) name(hint string) string {
	var b strings.Builder
	for _, r := range hint {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-/:", r)
		if ok {
			b.WriteRune(r)
		} else {
			b.WriteRune('_')
		}
	}
	base := strings.Trim(b.String(), "/")
	if base == "" {
		base = "op"
	}
	if len(base) > 180 {
		base = base[len(base)-180:]
	}
	name := base
	for k := 2; c.names[name]; k++ {
		name = fmt.Sprintf("%s:%d", base, k)
	}
	c.names[name] = true
	return name
}

// emit adds an op and returns its output's name.
func (c *converter) emit(hint string, kind dag.Kind, inputs []string, attrs dag.Attrs, params map[string]string) (string, int) {
	op := dag.Op{Name: c.name(hint), Kind: kind, Inputs: inputs, Attrs: attrs, ParamNames: params}
	c.ops = append(c.ops, op)
	return op.Name, len(c.ops) - 1
}

// attrs is kind's default attributes, changed by set.
func attrs(kind dag.Kind, set func(a *dag.Attrs)) dag.Attrs {
	a := dag.DefaultAttrs(kind)
	if set != nil {
		set(&a)
	}
	return a
}

// outputType refuses a trained output the file declares as other than
// float: predictions a loss can read are floats.
func (c *converter) outputType(o *onnxpb.ValueInfoProto) error {
	tt := o.GetType().GetTensorType()
	if tt == nil || tt.ElemType == nil {
		return nil
	}
	if et := dtype(tt.GetElemType()); et != tFloat && c.o.Loss != "" {
		return fileErrf(fmt.Sprintf("graph.output[%q]", o.GetName()), "is %s; a loss reads float32 predictions", et)
	}
	return nil
}
