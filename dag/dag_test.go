package dag

import (
	"bytes"
	"path/filepath"
	"reflect"
	"testing"
)

func load(t *testing.T, path string) *Graph {
	t.Helper()
	g, err := LoadFile(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return g
}

func TestShapesAndParams(t *testing.T) {
	g := load(t, "testdata/valid/all-ops.json")
	cases := []struct {
		op     string
		shape  Shape
		params int64
	}{
		{"attn", Shape{6, 12}, 4*12*12 + 4*12},
		{"ln", Shape{6, 12}, 2 * 12},
		{"fc", Shape{6, 7}, 7 * 12},
		{"t", Shape{6, 7}, 0},
		{"sum", Shape{6, 7}, 0},
		{"prod", Shape{6, 7}, 0},
		{"flat", Shape{42}, 0},
		{"proj", Shape{8}, 8*42 + 8},
		{"emb", Shape{5, 8}, 20 * 8},
		{"emb.pool", Shape{8}, 0},
		{"bagged", Shape{8}, 30 * 8},
		{"black.box", Shape{8}, 64},
		{"dots", Shape{3}, 0},
		{"cat", Shape{11}, 0},
		{"logits", Shape{4}, 4*11 + 4},
		{"loss", Shape{}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.op, func(t *testing.T) {
			i, ok := g.OpIndex(tc.op)
			if !ok {
				t.Fatalf("no op %q", tc.op)
			}
			if got := g.Out(i).Shape; !got.Equal(tc.shape) {
				t.Errorf("shape %v, want %v", got, tc.shape)
			}
			if got := g.Cost(i).Params; got != tc.params {
				t.Errorf("params %d, want %d", got, tc.params)
			}
		})
	}
	if want := []string{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}; !reflect.DeepEqual(paramNames(g, "attn"), want) {
		t.Errorf("attention params %v, want %v", paramNames(g, "attn"), want)
	}
	if got := paramNames(g, "fc"); !reflect.DeepEqual(got, []string{"weight"}) {
		t.Errorf("bias=false linear has params %v", got)
	}
	i, _ := g.OpIndex("bagged")
	if g.Op(i).Attrs.Mode != "sum" {
		t.Errorf("mode %q", g.Op(i).Attrs.Mode)
	}
	i, _ = g.OpIndex("black.box")
	if c := g.Cost(i); c.FwdFLOPs != 1000 || c.BwdFLOPs() != 2000 {
		t.Errorf("opaque flops %v/%v, want 1000 and the default 2000", c.FwdFLOPs, c.BwdFLOPs())
	}
}

func paramNames(g *Graph, op string) []string {
	i, _ := g.OpIndex(op)
	var out []string
	for _, p := range g.Params(i) {
		out = append(out, p.Name)
	}
	return out
}

// TestCostsByHand checks costs against counts written out for small ops.
func TestCostsByHand(t *testing.T) {
	g := load(t, "testdata/valid/all-ops.json")
	cost := func(name string) Cost { i, _ := g.OpIndex(name); return g.Cost(i) }
	// linear x[6,12] → [6,7] without bias: 2·6·12·7 each way; x stashed.
	if c := cost("fc"); c.FwdFLOPs != 2*6*12*7 || c.BwdInputFLOPs != 2*6*12*7 || c.BwdWeightFLOPs != 2*6*12*7 || c.StashBytes != 6*12*4 || c.OutBytes != 6*7*4 {
		t.Errorf("linear cost %+v", c)
	}
	// linear [42] → [8] with bias
	if c := cost("proj"); c.FwdFLOPs != 2*42*8+8 || c.BwdWeightFLOPs != 2*42*8+8 {
		t.Errorf("biased linear cost %+v", c)
	}
	// attention s=6, d=12, h=3
	s, d, h := 6.0, 12.0, 3.0
	fwd := (2*s*d*3*d + 3*d*s) + (2*s*d*d + s*d) + 2*s*s*d + 2*s*s*d + 5*h*s*s
	if c := cost("attn"); c.FwdFLOPs != fwd || c.StashBytes != 4*(6*12*5+3*6*6) {
		t.Errorf("attention cost %+v, want fwd %v", c, fwd)
	}
	// dot interaction of 3 vectors of 8: 3 pairs of 8 multiply-adds
	if c := cost("dots"); c.FwdFLOPs != 3*2*8 || c.StashBytes != 3*8*4 {
		t.Errorf("dot cost %+v", c)
	}
	if c := cost("cat"); c.FwdFLOPs != 0 || c.StashBytes != 0 {
		t.Errorf("concat cost %+v", c)
	}
	tot := g.Total()
	var params int64
	for i := 0; i < g.NumOps(); i++ {
		params += g.Cost(i).Params
	}
	if tot.Params != params || params == 0 {
		t.Errorf("total params %d, sum %d", tot.Params, params)
	}
}

// TestRoundTrip writes every valid file canonically and reloads it to an equal graph.
func TestRoundTrip(t *testing.T) {
	files, _ := filepath.Glob("testdata/valid/*.json")
	if len(files) < 2 {
		t.Fatal("no valid test files")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			g := load(t, f)
			out := Write(g.Model())
			g2, err := Load(out)
			if err != nil {
				t.Fatalf("reload: %v\n%s", err, out)
			}
			if !reflect.DeepEqual(g, g2) {
				t.Fatalf("reloaded graph differs")
			}
			if again := Write(g2.Model()); !bytes.Equal(out, again) {
				t.Fatalf("canonical form is not stable:\n%s\n---\n%s", out, again)
			}
		})
	}
}

func TestBuildDoesNotAlias(t *testing.T) {
	m, err := Parse([]byte(base(t)))
	if err != nil {
		t.Fatal(err)
	}
	g, err := Build(m)
	if err != nil {
		t.Fatal(err)
	}
	m.Ops[0].Inputs[0] = "changed"
	m.Inputs[0].Shape[0] = 99
	if g.Op(0).Inputs[0] != "tokens" || g.Inputs()[0].Shape[0] != 16 {
		t.Fatal("the graph shares memory with the model it was built from")
	}
}

func TestOrderIsTopologicalAndStable(t *testing.T) {
	doc := edit(t, base(t), `"inputs": ["img.fc"]}`, `"inputs": ["z.first"]}`,
		`"ops": [`, `"ops": [{"name": "z.first", "op": "relu", "inputs": ["img.fc"]},`)
	g, err := Load([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	pos := map[int]int{}
	for k, i := range g.Order() {
		pos[i] = k
	}
	for i := 0; i < g.NumOps(); i++ {
		for _, p := range g.Producers(i) {
			if pos[p] >= pos[i] {
				t.Errorf("%s before its producer %s", g.Op(i).Name, g.Op(p).Name)
			}
		}
	}
	for n := 0; n < 5; n++ {
		g2, _ := Load([]byte(doc))
		if !reflect.DeepEqual(g.Order(), g2.Order()) {
			t.Fatal("order changes between loads")
		}
	}
	var names []string
	for _, i := range g.Order() {
		names = append(names, g.Op(i).Name)
	}
	want := []string{"tok.emb", "tok.pool", "img.fc", "z.first", "img.act", "img.pool", "fuse", "head", "loss"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("order %v, want %v (ties by file position)", names, want)
	}
}

func TestBranches(t *testing.T) {
	g := load(t, "testdata/valid/two-branch-demo.json")
	secs := g.Branches()
	if len(secs) != 1 || secs[0].Join != "fuse" || secs[0].After != "" || len(secs[0].Branches) != 2 {
		t.Fatalf("sections %+v", secs)
	}
	b := secs[0].Branches
	if b[0].First != "tok.emb" || b[0].Last != "tok.pool" || b[0].Ops != 2 || b[1].Ops != 3 || b[1].Params != 32*32+32 {
		t.Errorf("branches %+v", b)
	}
	// a diamond in the middle of a chain: the join and the split are spine ops
	doc := edit(t, base(t), `{"name": "img.pool", "op": "mean",       "inputs": ["img.act"], "attrs": {"axis": 0}}`,
		`{"name": "img.left", "op": "relu", "inputs": ["img.act"]}, {"name": "img.right", "op": "tanh", "inputs": ["img.act"]},
		 {"name": "img.join", "op": "add", "inputs": ["img.left", "img.right"]},
		 {"name": "img.pool", "op": "mean", "inputs": ["img.join"], "attrs": {"axis": 0}}`,
		`"inputs": ["tok.pool", "img.pool"]`, `"inputs": ["img.pool"]`,
		tokIn+",", "", embOp+",", "", `{"name": "tok.pool", "op": "mean",       "inputs": ["tok.emb"], "attrs": {"axis": 0}},`, "")
	g2, err := Load([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	secs = g2.Branches()
	if len(secs) != 1 || secs[0].After != "img.act" || secs[0].Join != "img.join" || len(secs[0].Branches) != 2 {
		t.Fatalf("diamond sections %+v", secs)
	}
}
