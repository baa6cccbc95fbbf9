package partition

import (
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/models"
)

// checkTree verifies the SP invariants: leaves cover every op once; a parallel
// node's children share no edge; a series node's children only have edges
// from earlier children to later ones.
func checkTree(t *testing.T, g *dag.Graph, tr *Tree) {
	t.Helper()
	seen := make([]int, g.NumOps())
	for _, l := range tr.Root.Leaves() {
		for _, op := range l.Ops {
			seen[op]++
		}
	}
	for op, n := range seen {
		if n != 1 {
			t.Fatalf("op %q is in %d leaves", g.Op(op).Name, n)
		}
	}
	var walk func(n *Node)
	walk = func(n *Node) {
		if n.Kind == Leaf {
			return
		}
		owner := map[int]int{}
		total := 0
		for ci, c := range n.Children {
			for _, op := range c.Ops {
				owner[op] = ci
			}
			total += len(c.Ops)
		}
		if total != len(n.Ops) || len(n.Children) < 2 {
			t.Fatalf("%v node with %d children covering %d of %d ops", n.Kind, len(n.Children), total, len(n.Ops))
		}
		for _, u := range n.Ops {
			for _, v := range g.Consumers(u) {
				cv, ok := owner[v]
				if !ok || cv == owner[u] {
					continue
				}
				if n.Kind == Parallel {
					t.Fatalf("parallel children %d and %d share edge %s→%s", owner[u], cv, g.Op(u).Name, g.Op(v).Name)
				}
				if cv < owner[u] {
					t.Fatalf("series edge %s→%s goes backwards", g.Op(u).Name, g.Op(v).Name)
				}
			}
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(tr.Root)
}

func TestDecomposeZoo(t *testing.T) {
	for _, e := range models.List() {
		for _, preset := range []string{"default", "small"} {
			cfg, _ := e.Preset(preset)
			g, err := e.Build(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, max := range []int{0, 8} {
				tr := Decompose(g, max)
				checkTree(t, g, tr)
				if tr.Cuts != 0 {
					t.Errorf("%s: %d cuts in a series-parallel model", e.Name, tr.Cuts)
				}
				if max > 0 {
					var check func(n *Node)
					check = func(n *Node) {
						if n.Kind == Series && len(n.Children) > max {
							leaves := 0
							for _, c := range n.Children {
								if c.Kind == Leaf {
									leaves++
								}
							}
							if leaves > 1 && leaves == len(n.Children) {
								t.Errorf("%s: series of %d leaves not coarsened to %d", e.Name, len(n.Children), max)
							}
						}
						for _, c := range n.Children {
							check(c)
						}
					}
					check(tr.Root)
				}
			}
		}
	}
}

func TestDecomposeShapes(t *testing.T) {
	e, _ := models.Lookup("mmt")
	g, _ := e.Build(e.Small)
	tr := Decompose(g, 0)
	root := tr.Root
	if root.Kind != Series || root.Children[0].Kind != Parallel || len(root.Children[0].Children) != 3 {
		t.Fatalf("mmt small: root %v with first child %v", root.Kind, root.Children[0].Kind)
	}
	// concat, head, loss follow the branches
	if len(root.Children) != 4 {
		t.Errorf("root has %d children, want parallel, concat, head, loss", len(root.Children))
	}
}

func TestDecomposeRandom(t *testing.T) {
	cuts := 0
	for seed := int64(0); seed < 300; seed++ {
		g, err := models.RandomDAG(seed, 2+int(seed%60), 8)
		if err != nil {
			t.Fatal(err)
		}
		tr := Decompose(g, int(seed%5)*4)
		checkTree(t, g, tr)
		cuts += tr.Cuts
	}
	if cuts == 0 {
		t.Error("no random graph needed a cut: the non-SP path is untested")
	}
	t.Logf("%d non-SP cuts over 300 random graphs", cuts)
}

// TestNShape checks the non-SP fallback on the smallest non-SP graph.
func TestNShape(t *testing.T) {
	doc := `{"format": "graphpipe/model@1", "batch_size": 4,
	 "inputs": [{"name": "x", "shape": [4], "dtype": "float32"}, {"name": "y", "shape": [4], "dtype": "float32"}],
	 "ops": [
	  {"name": "a", "op": "relu", "inputs": ["x"]}, {"name": "b", "op": "relu", "inputs": ["x"]},
	  {"name": "c", "op": "relu", "inputs": ["a"]}, {"name": "d", "op": "add", "inputs": ["a", "b"]},
	  {"name": "e", "op": "add", "inputs": ["c", "d"]}, {"name": "loss", "op": "mse", "inputs": ["e", "y"]}]}`
	g, err := dag.Load([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	tr := Decompose(g, 0)
	checkTree(t, g, tr)
	if tr.Cuts != 1 {
		t.Errorf("cuts %d, want 1", tr.Cuts)
	}
}

func TestStageGraph(t *testing.T) {
	e, _ := models.Lookup("case-study")
	g, _ := e.Build(e.Small)
	idx := func(names ...string) []int {
		var out []int
		for _, n := range names {
			i, ok := g.OpIndex(n)
			if !ok {
				t.Fatalf("no op %s", n)
			}
			out = append(out, i)
		}
		return out
	}
	branch := func(b string) []int {
		var ops []int
		for i := 0; i < g.NumOps(); i++ {
			if strings.HasPrefix(g.Op(i).Name, b+".") {
				ops = append(ops, i)
			}
		}
		return ops
	}
	sg, err := NewStageGraph(g, [][]int{branch("b0"), branch("b1"), idx("concat", "head", "loss")})
	if err != nil {
		t.Fatal(err)
	}
	if len(sg.Edges) != 2 || sg.Edges[0].Tensors[0] != "b0.pool" || sg.Edges[0].Bytes != 32*4 {
		t.Errorf("edges %+v", sg.Edges)
	}
	if d := sg.Depth(); d[0] != 2 || d[1] != 2 || d[2] != 1 || sg.PipelineDepth() != 2 {
		t.Errorf("depth %v", d)
	}
	// not convex: the first and last op of branch b0 without the middle
	b0 := branch("b0")
	mid := b0[1 : len(b0)-1]
	rest := append(append(branch("b1"), idx("concat", "head", "loss")...), mid...)
	_, err = NewStageGraph(g, [][]int{{b0[0], b0[len(b0)-1]}, rest})
	if err == nil || !strings.Contains(err.Error(), "not convex") {
		t.Errorf("non-convex stage: %v", err)
	}
	// convex stages in a cycle: {b0 first half, b1 second half} and the rest
	b1 := branch("b1")
	s0 := append(append([]int{}, b0[:3]...), b1[3:]...)
	s1 := append(append(append([]int{}, b0[3:]...), b1[:3]...), idx("concat", "head", "loss")...)
	_, err = NewStageGraph(g, [][]int{s0, s1})
	if err == nil {
		t.Error("a stage graph with a cycle was accepted")
	}
	// missing op, duplicated op
	if _, err := NewStageGraph(g, [][]int{branch("b0")}); err == nil || !strings.Contains(err.Error(), "in no stage") {
		t.Errorf("missing op: %v", err)
	}
	if _, err := NewStageGraph(g, [][]int{branch("b0"), append(branch("b0"), branch("b1")...)}); err == nil || !strings.Contains(err.Error(), "also in stage") {
		t.Errorf("duplicate op: %v", err)
	}
}

// TestConvexStagesInACycle: every stage convex, yet A→B→C→A.
func TestConvexStagesInACycle(t *testing.T) {
	doc := `{"format": "graphpipe/model@1", "batch_size": 4,
	 "inputs": [{"name": "x", "shape": [4], "dtype": "float32"}, {"name": "y", "shape": [4], "dtype": "float32"}],
	 "ops": [
	  {"name": "a", "op": "relu", "inputs": ["x"]}, {"name": "b", "op": "relu", "inputs": ["a"]},
	  {"name": "bp", "op": "relu", "inputs": ["x"]}, {"name": "c", "op": "relu", "inputs": ["bp"]},
	  {"name": "cp", "op": "relu", "inputs": ["x"]}, {"name": "ap", "op": "relu", "inputs": ["cp"]},
	  {"name": "s", "op": "add", "inputs": ["b", "c", "ap"]}, {"name": "loss", "op": "mse", "inputs": ["s", "y"]}]}`
	g, err := dag.Load([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	id := func(n string) int { i, _ := g.OpIndex(n); return i }
	_, err = NewStageGraph(g, [][]int{{id("a"), id("ap")}, {id("b"), id("bp")}, {id("c"), id("cp")}, {id("s"), id("loss")}})
	if err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Fatalf("got %v, want a cycle refusal", err)
	}
	if _, err := NewStageGraph(g, [][]int{{id("a"), id("b")}, {id("bp"), id("c")}, {id("cp"), id("ap")}, {id("s"), id("loss")}}); err != nil {
		t.Fatalf("three parallel chains refused: %v", err)
	}
}
