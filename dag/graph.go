package dag

import (
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/gonum/graph"
	"gonum.org/v1/gonum/graph/simple"
	"gonum.org/v1/gonum/graph/topo"
)

// OpGraph returns the ops as a gonum directed graph: node i is op i, an edge
// u→v means op v reads op u's output. Inputs are not nodes.
func (g *Graph) OpGraph() *simple.DirectedGraph {
	return opGraph(len(g.m.Ops), g.consumers)
}

func opGraph(n int, consumers [][]int) *simple.DirectedGraph {
	dg := simple.NewDirectedGraph()
	for i := 0; i < n; i++ {
		dg.AddNode(simple.Node(i))
	}
	for u, vs := range consumers {
		for _, v := range vs {
			dg.SetEdge(simple.Edge{F: simple.Node(u), T: simple.Node(v)})
		}
	}
	return dg
}

// sort orders the ops topologically, ties broken by position in the file, and
// reports every cycle by the names of the ops on it.
func (g *Graph) sort(c *errs) bool {
	dg := opGraph(len(g.m.Ops), g.consumers)
	byID := func(ns []graph.Node) { slices.SortFunc(ns, func(a, b graph.Node) int { return int(a.ID() - b.ID()) }) }
	nodes, err := topo.SortStabilized(dg, byID)
	if err != nil {
		un, ok := err.(topo.Unorderable)
		if !ok {
			panic(err)
		}
		for _, scc := range un {
			c.list = append(c.list, &Error{Kind: "ops", Name: g.cycleText(dg, scc), Msg: "form a cycle"})
		}
		return false
	}
	g.order = make([]int, len(nodes))
	for k, n := range nodes {
		g.order[k] = int(n.ID())
	}
	return true
}

// cycleText finds one cycle through the lowest-numbered op of a strongly
// connected component and renders it as "a" -> "b" -> "a".
func (g *Graph) cycleText(dg *simple.DirectedGraph, scc []graph.Node) string {
	in := map[int64]bool{}
	start := scc[0].ID()
	for _, n := range scc {
		in[n.ID()] = true
		start = min(start, n.ID())
	}
	// breadth-first search from start back to start, inside the component
	prev := map[int64]int64{}
	queue := []int64{start}
	for len(queue) > 0 && prev[start] == 0 {
		u := queue[0]
		queue = queue[1:]
		ids := sortedIDs(dg.From(u))
		for _, v := range ids {
			if _, seen := prev[v]; !seen && in[v] {
				prev[v] = u + 1 // +1 so that 0 means unset
				queue = append(queue, v)
			}
		}
	}
	path := []int64{start}
	for v := prev[start] - 1; v != start; v = prev[v] - 1 {
		path = append(path, v)
	}
	path = append(path, start)
	slices.Reverse(path)
	names := make([]string, len(path))
	for i, id := range path {
		names[i] = strconv.Quote(g.m.Ops[id].Name)
	}
	return strings.Join(names, " -> ")
}

func sortedIDs(it graph.Nodes) []int64 {
	var ids []int64
	for it.Next() {
		ids = append(ids, it.Node().ID())
	}
	slices.Sort(ids)
	return ids
}

// Model returns the document the graph was built from. Callers must not modify it.
func (g *Graph) Model() *Model { return &g.m }

// Name is the model's name.
func (g *Graph) Name() string { return g.m.Name }

// BatchSize is the global mini-batch.
func (g *Graph) BatchSize() int64 { return g.m.BatchSize }

// Seed seeds parameter initialisation and synthetic data.
func (g *Graph) Seed() int64 { return g.m.Seed }

// Inputs are the model's input tensors, in file order.
func (g *Graph) Inputs() []Input { return g.m.Inputs }

// NumOps is the number of ops.
func (g *Graph) NumOps() int { return len(g.m.Ops) }

// Op returns op i (its position in the file).
func (g *Graph) Op(i int) *Op { return &g.m.Ops[i] }

// OpIndex finds an op by name.
func (g *Graph) OpIndex(name string) (int, bool) { i, ok := g.opIndex[name]; return i, ok }

// Tensor returns an input or op output by name, nil if there is none.
func (g *Graph) Tensor(name string) *Tensor { return g.tensors[name] }

// Out is op i's output tensor.
func (g *Graph) Out(i int) *Tensor { return g.tensors[g.m.Ops[i].Name] }

// OpInputs are the tensors op i reads, in the order of its inputs.
func (g *Graph) OpInputs(i int) []*Tensor { return g.opInputs[i] }

// Consumers are the ops that read op i's output, ascending.
func (g *Graph) Consumers(i int) []int { return g.consumers[i] }

// Producers are the ops whose outputs op i reads, ascending and unique.
func (g *Graph) Producers(i int) []int {
	var out []int
	for _, t := range g.opInputs[i] {
		if t.Producer >= 0 {
			out = appendUnique(out, t.Producer)
		}
	}
	slices.Sort(out)
	return out
}

// Params lists op i's trainable parameters.
func (g *Graph) Params(i int) []Param { return g.params[i] }

// Buffers lists op i's buffers: state a forward pass updates and no
// optimizer touches (batch_norm's running statistics). They travel with the
// parameters: init files, checkpoints, dumps and exports hold both.
func (g *Graph) Buffers(i int) []Param { return g.buffers[i] }

// Version is the model's format version: 1 or 2.
func (g *Graph) Version() int { return g.version() }

// Cost is op i's per-sample cost.
func (g *Graph) Cost(i int) Cost { return g.costs[i] }

// Order is a topological order of the op indices, ties broken by file position.
func (g *Graph) Order() []int { return g.order }

// Loss is the index of the loss op.
func (g *Graph) Loss() int { return g.loss }

// Total sums the per-sample cost of every op. Build has checked the sums fit.
func (g *Graph) Total() Cost {
	var t Cost
	for _, c := range g.costs {
		t.FwdFLOPs += c.FwdFLOPs
		t.BwdInputFLOPs += c.BwdInputFLOPs
		t.BwdWeightFLOPs += c.BwdWeightFLOPs
		t.Params += c.Params
		t.Buffers += c.Buffers
		t.OutBytes += c.OutBytes
		t.StashBytes += c.StashBytes
		t.MemBytes += c.MemBytes
	}
	return t
}
