package partition

import (
	"fmt"
	"sort"
	"strings"

	"github.com/graphpipe/graphpipe/dag"
)

// StageGraph is a partition of a graph's ops into stages whose dependencies
// form a DAG.
type StageGraph struct {
	G      *dag.Graph
	Stages [][]int // per stage, its ops in topological order
	Edges  []Edge  // sorted by (From, To)
	stage  []int   // op → stage
	order  []int   // a topological order of the stages
}

// Edge is a stage dependency: the outputs of ops in From read by ops in To.
type Edge struct {
	From, To int
	Tensors  []string // op output names, sorted
	Bytes    int64    // per sample, summed over Tensors
}

// Error is a stage graph that breaks a rule.
type Error struct {
	Stage int // -1 when not about one stage
	Msg   string
}

func (e *Error) Error() string {
	if e.Stage < 0 {
		return "stage graph: " + e.Msg
	}
	return fmt.Sprintf("stage %d: %s", e.Stage, e.Msg)
}

// NewStageGraph checks a partition and derives its stage edges.
func NewStageGraph(g *dag.Graph, stages [][]int) (*StageGraph, error) {
	sg := &StageGraph{G: g, stage: make([]int, g.NumOps())}
	for i := range sg.stage {
		sg.stage[i] = -1
	}
	for s, ops := range stages {
		if len(ops) == 0 {
			return nil, &Error{s, "has no ops"}
		}
		for _, op := range ops {
			if op < 0 || op >= g.NumOps() {
				return nil, &Error{s, fmt.Sprintf("op index %d out of range", op)}
			}
			if sg.stage[op] >= 0 {
				return nil, &Error{s, fmt.Sprintf("op %q is also in stage %d", g.Op(op).Name, sg.stage[op])}
			}
			sg.stage[op] = s
		}
		cp := append([]int{}, ops...)
		sortOps(g, cp)
		sg.Stages = append(sg.Stages, cp)
	}
	for op, s := range sg.stage {
		if s < 0 {
			return nil, &Error{-1, fmt.Sprintf("op %q is in no stage", g.Op(op).Name)}
		}
	}
	if err := sg.checkConvex(); err != nil {
		return nil, err
	}
	sg.deriveEdges()
	if err := sg.sortStages(); err != nil {
		return nil, err
	}
	return sg, nil
}

// checkConvex refuses a stage that a path leaves and re-enters: an op outside
// the stage that both descends from and leads to ops of the stage.
func (sg *StageGraph) checkConvex() error {
	g := sg.G
	n := g.NumOps()
	for s, ops := range sg.Stages {
		// below: reached from the stage; above: reaches the stage
		below, above := newBitset(n), newBitset(n)
		for _, op := range ops {
			below.set(op)
			above.set(op)
		}
		order := g.Order()
		for _, u := range order {
			if below.has(u) {
				for _, v := range g.Consumers(u) {
					below.set(v)
				}
			}
		}
		for k := len(order) - 1; k >= 0; k-- {
			v := order[k]
			if above.has(v) {
				for _, u := range g.Producers(v) {
					above.set(u)
				}
			}
		}
		for op := 0; op < n; op++ {
			if sg.stage[op] != s && below.has(op) && above.has(op) {
				return &Error{s, fmt.Sprintf("is not convex: op %q (stage %d) lies on a path from the stage back into it", g.Op(op).Name, sg.stage[op])}
			}
		}
	}
	return nil
}

func (sg *StageGraph) deriveEdges() {
	g := sg.G
	type key struct{ from, to int }
	tensors := map[key]map[string]int64{}
	for u := 0; u < g.NumOps(); u++ {
		for _, v := range g.Consumers(u) {
			k := key{sg.stage[u], sg.stage[v]}
			if k.from == k.to {
				continue
			}
			if tensors[k] == nil {
				tensors[k] = map[string]int64{}
			}
			tensors[k][g.Op(u).Name] = g.Out(u).Bytes()
		}
	}
	for k, ts := range tensors {
		e := Edge{From: k.from, To: k.to}
		for name, b := range ts {
			e.Tensors = append(e.Tensors, name)
			e.Bytes += b
		}
		sort.Strings(e.Tensors)
		sg.Edges = append(sg.Edges, e)
	}
	sort.Slice(sg.Edges, func(i, j int) bool {
		a, b := sg.Edges[i], sg.Edges[j]
		return a.From < b.From || a.From == b.From && a.To < b.To
	})
}

// sortStages orders the stages topologically (ties by index), refusing cycles.
func (sg *StageGraph) sortStages() error {
	edges := make([][2]int, len(sg.Edges))
	for i, e := range sg.Edges {
		edges[i] = [2]int{e.From, e.To}
	}
	order, left := TopoOrder(len(sg.Stages), edges)
	if left != nil {
		parts := make([]string, len(left))
		for i, s := range left {
			parts[i] = fmt.Sprint(s)
		}
		return &Error{-1, "stages " + strings.Join(parts, ", ") + " depend on each other in a cycle"}
	}
	sg.order = order
	return nil
}

// TopoOrder orders n nodes under edges (from, to), smallest ready node first.
// On a cycle it returns the nodes it could not order, ascending.
func TopoOrder(n int, edges [][2]int) (order, left []int) {
	indeg := make([]int, n)
	out := make([][]int, n)
	for _, e := range edges {
		indeg[e[1]]++
		out[e[0]] = append(out[e[0]], e[1])
	}
	var ready []int
	for v := 0; v < n; v++ {
		if indeg[v] == 0 {
			ready = append(ready, v)
		}
	}
	for len(ready) > 0 {
		sort.Ints(ready)
		v := ready[0]
		ready = ready[1:]
		order = append(order, v)
		for _, w := range out[v] {
			if indeg[w]--; indeg[w] == 0 {
				ready = append(ready, w)
			}
		}
	}
	if len(order) == n {
		return order, nil
	}
	for v := 0; v < n; v++ {
		if indeg[v] > 0 {
			left = append(left, v)
		}
	}
	return nil, left
}

// StageOf returns the stage of an op.
func (sg *StageGraph) StageOf(op int) int { return sg.stage[op] }

// Order is a topological order of the stages.
func (sg *StageGraph) Order() []int { return sg.order }

// Succ lists the stages that depend on s, ascending.
func (sg *StageGraph) Succ(s int) []int {
	var out []int
	for _, e := range sg.Edges {
		if e.From == s {
			out = append(out, e.To)
		}
	}
	return out
}

// Pred lists the stages s depends on, ascending.
func (sg *StageGraph) Pred(s int) []int {
	var out []int
	for _, e := range sg.Edges {
		if e.To == s {
			out = append(out, e.From)
		}
	}
	sort.Ints(out)
	return out
}

// Depth is, per stage, 1 + the longest path in stages from it to a sink: the
// micro-batches a 1F1B schedule keeps in flight there.
func (sg *StageGraph) Depth() []int {
	d := make([]int, len(sg.Stages))
	for k := len(sg.order) - 1; k >= 0; k-- {
		s := sg.order[k]
		d[s] = 1
		for _, t := range sg.Succ(s) {
			d[s] = max(d[s], 1+d[t])
		}
	}
	return d
}

// PipelineDepth is the longest path through the stage DAG, in stages.
func (sg *StageGraph) PipelineDepth() int {
	m := 0
	for _, d := range sg.Depth() {
		m = max(m, d)
	}
	return m
}
