package dag

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestShapesV2(t *testing.T) {
	g := load(t, "testdata/valid/all-ops-v2.json")
	if g.Version() != 2 {
		t.Fatalf("version %d, want 2", g.Version())
	}
	cases := []struct {
		op    string
		shape Shape
	}{
		{"conv", Shape{4, 8, 8}}, {"bn", Shape{4, 8, 8}}, {"mp", Shape{4, 4, 4}}, {"ap", Shape{4, 4, 4}},
		{"gap", Shape{4, 1, 1}}, {"flat", Shape{4}}, {"seqT", Shape{6, 4}}, {"mm", Shape{4, 4}},
		{"sm", Shape{4, 4}}, {"sl", Shape{2, 4}}, {"pd", Shape{2, 6}}, {"rm", Shape{6}}, {"rs", Shape{2, 1}},
		{"bsub", Shape{2, 6}}, {"bdiv", Shape{2, 6}}, {"hsg", Shape{6}}, {"hsw", Shape{6}}, {"pw", Shape{6}}, {"dr", Shape{6}}, {"pos", Shape{6}},
		{"adds", Shape{6}}, {"rsub", Shape{6}}, {"ids", Shape{2}}, {"emb", Shape{2, 6}}, {"cat", Shape{22}},
		{"head", Shape{10}},
	}
	for _, tc := range cases {
		i, ok := g.OpIndex(tc.op)
		if !ok {
			t.Fatalf("no op %q", tc.op)
		}
		if got := g.Out(i).Shape; !got.Equal(tc.shape) {
			t.Errorf("%s: shape %v, want %v", tc.op, got, tc.shape)
		}
	}
	if r := g.Tensor("ids").Range; r == nil || *r != [2]int64{1, 4} {
		t.Errorf("constant's range %v, want [1, 4)", r)
	}
}

func TestParamsAndBuffers(t *testing.T) {
	g := load(t, "testdata/valid/all-ops-v2.json")
	keys := func(ps []Param) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name+"="+p.Key+p.Shape.String())
		}
		return out
	}
	cases := []struct {
		op             string
		params, buffer []string
	}{
		{"conv", []string{"weight=backbone.conv.weight[4, 3, 3, 3]", "bias=conv.bias[4]"}, nil},
		{"bn", []string{"weight=bn.weight[4]", "bias=bn.bias[4]"}, []string{"running_mean=bn.running_mean[4]", "running_var=bn.running_var[4]"}},
		{"pos", []string{"value=pos_embedding[6]"}, nil},
		{"head", []string{"weight=head.w[22, 10]", "bias=head.b[10]"}, nil},
		{"mm", nil, nil},
	}
	for _, tc := range cases {
		i, _ := g.OpIndex(tc.op)
		if got := keys(g.Params(i)); !reflect.DeepEqual(got, tc.params) {
			t.Errorf("%s: params %v, want %v", tc.op, got, tc.params)
		}
		if got := keys(g.Buffers(i)); !reflect.DeepEqual(got, tc.buffer) {
			t.Errorf("%s: buffers %v, want %v", tc.op, got, tc.buffer)
		}
	}
	i, _ := g.OpIndex("bn")
	if c := g.Cost(i); c.Params != 8 || c.Buffers != 8 {
		t.Errorf("batch_norm counts %d parameters and %d buffer numbers, want 8 and 8", c.Params, c.Buffers)
	}
	// conv [3,8,8] → [4,8,8] with a 3×3 kernel: 2·(4·8·8)·(3·3·3) each way
	i, _ = g.OpIndex("conv")
	if c := g.Cost(i); c.FwdFLOPs != 2*256*27+256 || c.BwdInputFLOPs != 2*256*27 || c.StashBytes != 3*64*4 {
		t.Errorf("conv cost %+v", c)
	}
}

func TestWindowOut(t *testing.T) {
	cases := []struct {
		n, lo, hi, k, s, d int64
		ceil               bool
		want               int64
	}{
		{224, 3, 3, 7, 2, 1, false, 112}, // ResNet's stem
		{112, 1, 1, 3, 2, 1, false, 56},  // its max pool
		{112, 0, 0, 3, 2, 1, true, 56},   // GoogLeNet's pools: ceil
		{56, 0, 0, 3, 2, 1, true, 28},
		{5, 0, 0, 2, 2, 1, true, 3},
		{5, 1, 1, 2, 2, 1, true, 3}, // the last window would start in the padding
		{8, 0, 0, 3, 1, 2, false, 4},
		{2, 0, 0, 3, 1, 1, false, 0},
		{8, 0, 0, 3, 0, 1, false, 0}, // stride 0: no window, not a division by zero
		{8, 0, 0, 3, 0, 1, true, 0},
		{8, 0, 0, 3, 1, 0, false, 0}, // dilation 0
		{8, 0, 0, 0, 1, 1, false, 0}, // kernel 0
		{8, 0, 0, 3, -2, 1, false, 0},
	}
	for _, c := range cases {
		if got := WindowOut(c.n, c.lo, c.hi, c.k, c.s, c.d, c.ceil); got != c.want {
			t.Errorf("WindowOut%v = %d, want %d", c, got, c.want)
		}
	}
}

func TestSliceRange(t *testing.T) {
	cases := []struct{ n, start, end, step, first, count int64 }{
		{10, 0, 10, 1, 0, 10}, {10, 2, 5, 1, 2, 3}, {10, -3, 10, 1, 7, 3}, {10, 0, -1, 1, 0, 9},
		{10, 0, 1 << 62, 1, 0, 10}, {10, 1, 10, 3, 1, 3}, {10, 5, 2, 1, 5, 0}, {10, -20, 2, 1, 0, 2},
	}
	for _, c := range cases {
		f, n := SliceRange(c.n, c.start, c.end, c.step)
		if f != c.first || n != c.count {
			t.Errorf("SliceRange(%d, %d, %d, %d) = %d, %d; want %d, %d", c.n, c.start, c.end, c.step, f, n, c.first, c.count)
		}
	}
}

func TestBroadcast(t *testing.T) {
	cases := []struct {
		a, b, want Shape
		ok         bool
	}{
		{Shape{2, 3}, Shape{3}, Shape{2, 3}, true}, {Shape{2, 1}, Shape{1, 4}, Shape{2, 4}, true},
		{Shape{}, Shape{5}, Shape{5}, true}, {Shape{4, 1, 1}, Shape{4, 8, 8}, Shape{4, 8, 8}, true},
		{Shape{2, 3}, Shape{2}, nil, false},
	}
	for _, c := range cases {
		got, ok := Broadcast(c.a, c.b)
		if ok != c.ok || !got.Equal(c.want) {
			t.Errorf("Broadcast(%v, %v) = %v, %v; want %v, %v", c.a, c.b, got, ok, c.want, c.ok)
		}
	}
}

// TestRefusalsV2 covers what model@2 adds: the version gate, parameter
// names, and the shapes and attributes of its ops.
func TestRefusalsV2(t *testing.T) {
	v2 := func(pairs ...string) func(*testing.T) string {
		return func(t *testing.T) string {
			return edit(t, base(t), append([]string{`"graphpipe/model@1"`, `"graphpipe/model@2"`}, pairs...)...)
		}
	}
	gelu := `"op": "gelu",       "inputs": ["img.fc"]`
	cases := []struct {
		name            string
		doc             func(t *testing.T) string
		kind, op, field string
		msg             string
	}{
		{"@2 op in @1", ed(gelu, `"op": "softmax", "inputs": ["img.fc"]`), "op", "img.act", "op", "graphpipe/model@2"},
		{"@2 attr in @1", ed(`{"out": 10}`, `{"out": 10, "weight_layout": "in_out"}`), "op", "head", "attrs.weight_layout", "graphpipe/model@2"},
		{"params in @1", ed(`"attrs": {"out": 10}}`, `"attrs": {"out": 10}, "params": {"weight": "w"}}`), "op", "head", "params", "graphpipe/model@2"},
		{"unknown slot", v2(`"attrs": {"out": 10}}`, `"attrs": {"out": 10}, "params": {"kernel": "w"}}`), "op", "head", "params.kernel", "no parameter"},
		{"shared name", v2(`"attrs": {"out": 10}}`, `"attrs": {"out": 10}, "params": {"weight": "img.fc.weight"}}`), "op", "head", "params.weight", "also a parameter"},
		{"bad name", v2(`"attrs": {"out": 10}}`, `"attrs": {"out": 10}, "params": {"weight": "a b"}}`), "op", "head", "params.weight", "contains"},
		{"params not strings", v2(`"attrs": {"out": 10}}`, `"attrs": {"out": 10}, "params": {"weight": 3}}`), "op", "head", "params.weight", "string"},
		{"weight layout", v2(`{"out": 10}`, `{"out": 10, "weight_layout": "io"}`), "op", "head", "attrs.weight_layout", "out_in"},
		{"conv rank", v2(gelu, `"op": "conv2d", "inputs": ["img.fc"], "attrs": {"out": 4, "kernel": [3, 3]}`), "op", "img.act", "inputs", "want 3 dims"},
		{"conv kernel", v2(gelu, `"op": "conv2d", "inputs": ["img.fc"], "attrs": {"out": 4, "kernel": [3]}`), "op", "img.act", "attrs.kernel", "2 integers"},
		{"conv padding", v2(gelu, `"op": "conv2d", "inputs": ["img.fc"], "attrs": {"out": 4, "kernel": [3, 3], "padding": [1, 1]}`), "op", "img.act", "attrs.padding", "4 integers"},
		{"pool too big", v2(imageIn, `{"name": "image", "shape": [2, 2, 2], "dtype": "float32"}`, fcOp, `{"name": "img.fc", "op": "max_pool2d", "inputs": ["image"], "attrs": {"kernel": [3, 3]}}`), "op", "img.fc", "attrs.kernel", "does not fit"},
		{"groups", v2(imageIn, `{"name": "image", "shape": [3, 4, 4], "dtype": "float32"}`, fcOp, `{"name": "img.fc", "op": "conv2d", "inputs": ["image"], "attrs": {"out": 4, "kernel": [1, 1], "groups": 2}}`), "op", "img.fc", "attrs.groups", "divide"},
		{"momentum", v2(gelu, `"op": "batch_norm", "inputs": ["img.fc"], "attrs": {"momentum": 2}`), "op", "img.act", "attrs.momentum", "[0, 1]"},
		{"matmul shapes", v2(gelu, `"op": "matmul", "inputs": ["img.fc", "img.fc"]`), "op", "img.act", "inputs", "cannot multiply"},
		{"reshape count", v2(gelu, `"op": "reshape", "inputs": ["img.fc"], "attrs": {"shape": [7, 32]}`), "op", "img.act", "attrs.shape", "does not hold"},
		{"perm", v2(gelu, `"op": "transpose", "inputs": ["img.fc"], "attrs": {"perm": [0, 0]}`), "op", "img.act", "attrs.perm", "permutation"},
		{"empty slice", v2(gelu, `"op": "slice", "inputs": ["img.fc"], "attrs": {"axis": 0, "start": 5, "end": 2}`), "op", "img.act", "attrs.start", "empty"},
		{"slice step", v2(gelu, `"op": "slice", "inputs": ["img.fc"], "attrs": {"axis": 0, "start": 0, "end": 2, "step": 0}`), "op", "img.act", "attrs.step", "positive"},
		{"pads count", v2(gelu, `"op": "pad", "inputs": ["img.fc"], "attrs": {"pads": [1, 1]}`), "op", "img.act", "attrs.pads", "want 4"},
		{"negative pad", v2(gelu, `"op": "pad", "inputs": ["img.fc"], "attrs": {"pads": [1, 1, -1, 0]}`), "op", "img.act", "attrs.pads", "≥ 0"},
		{"axes twice", v2(`"op": "mean",       "inputs": ["img.act"], "attrs": {"axis": 0}`, `"op": "reduce_mean", "inputs": ["img.act"], "attrs": {"axes": [0, -2]}`), "op", "img.pool", "attrs.axes", "distinct"},
		{"hard_sigmoid alpha", v2(gelu, `"op": "hard_sigmoid", "inputs": ["img.fc"], "attrs": {"alpha": "steep"}`), "op", "img.act", "attrs.alpha", "number"},
		{"hard_swish arity", v2(fuseOp, `{"name": "fuse", "op": "hard_swish", "inputs": ["tok.pool", "img.pool"]}`), "op", "fuse", "inputs", "1 input"},
		{"hard_swish in @1", ed(gelu, `"op": "hard_swish", "inputs": ["img.fc"]`), "op", "img.act", "op", "graphpipe/model@2"},
		{"dropout p", v2(gelu, `"op": "dropout", "inputs": ["img.fc"], "attrs": {"p": 1}`), "op", "img.act", "attrs.p", "[0, 1)"},
		{"no broadcast", v2(fuseOp, `{"name": "fuse", "op": "sub", "inputs": ["tok.emb", "img.fc"]}`), "op", "fuse", "inputs", "broadcast"},
		{"scalar arity", v2(fuseOp, `{"name": "fuse", "op": "mul", "inputs": ["tok.pool", "img.pool"], "attrs": {"scalar": 2}}`), "op", "fuse", "inputs", "takes 1 input"},
		{"constant count", v2(gelu, `"op": "constant", "inputs": [], "attrs": {"shape": [8, 32], "value": [1, 2]}`), "op", "img.act", "attrs.value", "want 256"},
		{"constant int", v2(gelu, `"op": "constant", "inputs": [], "attrs": {"shape": [2], "dtype": "int32", "value": [1.5, 2]}`), "op", "img.act", "attrs.value", "not an int32"},
		{"constant too big", v2(gelu, `"op": "constant", "inputs": [], "attrs": {"shape": [4096, 4096], "value": 0}`), "op", "img.act", "attrs.shape", "weights file"},
		{"unknown op names known", v2(gelu, `"op": "swish", "inputs": ["img.fc"]`), "op", "img.act", "op", "known: add, attention"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(tc.doc(t)))
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("got %v, want a refusal", err)
			}
			e := es[0]
			if e.Kind != tc.kind || e.Name != tc.op || e.Field != tc.field || !strings.Contains(e.Error(), tc.msg) {
				t.Fatalf("first problem %q; want kind %q, name %q, field %q, saying %q\nall:\n%v", e.Error(), tc.kind, tc.op, tc.field, tc.msg, err)
			}
		})
	}
}

// TestV1RendersAsBefore: a @1 model renders with the @1 format and none of
// @2's attributes, so its hash (and every plan made of it) is unchanged.
func TestV1RendersAsBefore(t *testing.T) {
	g := load(t, "testdata/valid/all-ops.json")
	out := string(Write(g.Model()))
	if !strings.Contains(out, `"format": "graphpipe/model@1"`) || strings.Contains(out, "weight_layout") || strings.Contains(out, "scalar") {
		t.Fatalf("a @1 model renders with @2's fields:\n%s", out)
	}
	g2 := load(t, "testdata/valid/all-ops-v2.json")
	if out := string(Write(g2.Model())); !strings.Contains(out, `"params": {"weight": "backbone.conv.weight"}`) || !strings.Contains(out, `"scalar": 0.5`) {
		t.Fatalf("a @2 model loses its fields:\n%s", out)
	}
}
