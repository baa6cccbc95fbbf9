package dag

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// base is the spec's example; each refusal case edits it.
func base(t testing.TB) string {
	data, err := os.ReadFile("testdata/valid/two-branch-demo.json")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// edit replaces each old with new in doc; a missing old is a broken test.
func edit(t testing.TB, doc string, pairs ...string) string {
	for i := 0; i < len(pairs); i += 2 {
		if !strings.Contains(doc, pairs[i]) {
			t.Fatalf("edit: %q not in the document", pairs[i])
		}
		doc = strings.Replace(doc, pairs[i], pairs[i+1], 1)
	}
	return doc
}

const (
	headOp  = `{"name": "head",     "op": "linear",     "inputs": ["fuse"],    "attrs": {"out": 10}}`
	lossOp  = `{"name": "loss",     "op": "softmax_cross_entropy", "inputs": ["head", "label"]}`
	imageIn = `{"name": "image",  "shape": [8, 32], "dtype": "float32"}`
	tokIn   = `{"name": "tokens", "shape": [16], "dtype": "int32", "range": [0, 500]}`
	embOp   = `{"name": "tok.emb",  "op": "embedding",  "inputs": ["tokens"], "attrs": {"num": 500, "dim": 32}}`
	fcOp    = `{"name": "img.fc",   "op": "linear",     "inputs": ["image"],   "attrs": {"out": 32}}`
	fuseOp  = `{"name": "fuse",     "op": "concat",     "inputs": ["tok.pool", "img.pool"]}`
)

// TestRefusals covers every kind of refusal in the spec. Each case names the
// kind ("op", "input", "ops" or "" for the model), the name and the field the
// first problem must carry, and words its message must contain.
func TestRefusals(t *testing.T) {
	type want struct{ kind, name, field, msg string }
	cases := []struct {
		name string
		doc  func(t *testing.T) string
		want want
	}{
		// not JSON, or not the document
		{"not json", raw(`{"format": `), want{"", "", "", "not a JSON object"}},
		{"empty file", raw(``), want{"", "", "", "empty"}},
		{"garbage", raw(`hello`), want{"", "", "", "invalid character"}},
		{"array document", raw(`[1, 2]`), want{"", "", "", "want an object"}},
		{"null document", raw(`null`), want{"", "", "", "null"}},
		{"trailing data", func(t *testing.T) string { return base(t) + "{}" }, want{"", "", "", "after the closing brace"}},
		// the model's fields
		{"wrong format", ed(`"graphpipe/model@1"`, `"graphpipe/model@3"`), want{"", "", "format", "graphpipe/model@1"}},
		{"missing format", ed(`"format": "graphpipe/model@1",`, ``), want{"", "", "format", "required"}},
		{"unknown model field", ed(`"seed": 1,`, `"seed": 1, "epochs": 3,`), want{"", "", `"epochs"`, "unknown field"}},
		{"batch zero", ed(`"batch_size": 64`, `"batch_size": 0`), want{"", "", "batch_size", "positive"}},
		{"batch string", ed(`"batch_size": 64`, `"batch_size": "64"`), want{"", "", "batch_size", "must be an integer"}},
		{"batch fraction", ed(`"batch_size": 64`, `"batch_size": 6.5`), want{"", "", "batch_size", "must be an integer"}},
		{"batch overflow", ed(`"batch_size": 64`, `"batch_size": 99999999999999999999`), want{"", "", "batch_size", "does not fit"}},
		{"missing batch", ed(`"batch_size": 64,`, ``), want{"", "", "batch_size", "required"}},
		{"inputs not array", ed(`"inputs": [`, `"inputs": {"a": [`, `}
  ],
  "ops"`, `}]},
  "ops"`), want{"", "", "inputs", "must be an array"}},
		{"ops missing", ed(`"ops": [`, `"opz": [`), want{"", "", `"opz"`, "unknown field"}},
		// inputs
		{"input unknown field", ed(imageIn, `{"name": "image", "shape": [8, 32], "dtype": "float32", "layout": "nchw"}`), want{"input", "image", `"layout"`, "unknown field"}},
		{"input missing name", ed(imageIn, `{"shape": [8, 32], "dtype": "float32"}`), want{"", "", "inputs[1].name", "required"}},
		{"input null name", ed(imageIn, `{"name": null, "shape": [8, 32], "dtype": "float32"}`), want{"", "", "inputs[1].name", "must be a string"}},
		{"input not object", ed(imageIn, `"image"`), want{"", "", "inputs[1]", "must be an object"}},
		{"input bad dtype", ed(imageIn, `{"name": "image", "shape": [8, 32], "dtype": "float64"}`), want{"input", "image", "dtype", "float32"}},
		{"input zero dim", ed(imageIn, `{"name": "image", "shape": [8, 0], "dtype": "float32"}`), want{"input", "image", "shape", "positive"}},
		{"input shape not ints", ed(imageIn, `{"name": "image", "shape": [8, "a"], "dtype": "float32"}`), want{"input", "image", "shape", "integer"}},
		{"input shape overflow", ed(imageIn, `{"name": "image", "shape": [4294967296, 4294967296], "dtype": "float32"}`), want{"input", "image", "shape", "int64"}},
		{"int32 without range", ed(tokIn, `{"name": "tokens", "shape": [16], "dtype": "int32"}`), want{"input", "tokens", "range", "required"}},
		{"empty range", ed(`[0, 500]`, `[5, 5]`), want{"input", "tokens", "range", "empty"}},
		{"range of three", ed(`[0, 500]`, `[0, 1, 2]`), want{"input", "tokens", "range", "[lo, hi]"}},
		{"float with range", ed(imageIn, `{"name": "image", "shape": [8, 32], "dtype": "float32", "range": [0, 1]}`), want{"input", "image", "range", "int32 inputs only"}},
		{"unused input", ed(imageIn, imageIn+`, {"name": "extra", "shape": [3], "dtype": "float32"}`), want{"input", "extra", "", "not used"}},
		// names
		{"empty name", ed(`"name": "img.act"`, `"name": ""`, `["img.act"]`, `[""]`), want{"op", "", "name", "empty"}},
		{"bad name chars", ed(`"name": "img.act"`, `"name": "img act"`, `["img.act"]`, `["img act"]`), want{"op", "img act", "name", "letters"}},
		{"long name", ed(`"name": "img.act"`, `"name": "`+strings.Repeat("a", 201)+`"`, `["img.act"]`, `["`+strings.Repeat("a", 201)+`"]`), want{"op", strings.Repeat("a", 201), "name", "at most 200"}},
		{"op named as input", ed(`"name": "img.act"`, `"name": "image"`), want{"op", "image", "name", "an input"}},
		{"op named twice", ed(`"name": "img.act"`, `"name": "img.fc"`), want{"op", "img.fc", "name", "another op"}},
		{"input named twice", ed(imageIn, imageIn+`, `+imageIn), want{"input", "image", "name", "twice"}},
		// ops: fields and kinds
		{"op unknown field", ed(headOp, `{"name": "head", "op": "linear", "inputs": ["fuse"], "attrs": {"out": 10}, "device": 3}`), want{"op", "head", `"device"`, "unknown field"}},
		{"unknown op", ed(`"op": "gelu"`, `"op": "swish"`), want{"op", "img.act", "op", "unknown operator"}},
		{"op missing kind", ed(`"op": "gelu", `, ``), want{"op", "img.act", "op", "required"}},
		{"op not object", ed(headOp, `7`), want{"", "", "ops[6]", "must be an object"}},
		{"inputs not strings", ed(`"inputs": ["fuse"]`, `"inputs": [3]`), want{"op", "head", "inputs", "array of strings"}},
		{"inputs missing", ed(`"inputs": ["fuse"], `, ``), want{"op", "head", "inputs", "required"}},
		{"attrs not object", ed(`"attrs": {"out": 10}`, `"attrs": [10]`), want{"op", "head", "attrs", "must be an object"}},
		// attributes
		{"unknown attr", ed(`{"out": 10}`, `{"out": 10, "act": "relu"}`), want{"op", "head", "attrs.act", "unknown attribute"}},
		{"attr on attr-less op", ed(`"inputs": ["img.fc"]}`, `"inputs": ["img.fc"], "attrs": {"approximate": "tanh"}}`), want{"op", "img.act", "attrs.approximate", "known: none"}},
		{"missing attr", ed(`"attrs": {"out": 10}`, `"attrs": {}`), want{"op", "head", "attrs.out", "required"}},
		{"attr int as string", ed(`{"out": 10}`, `{"out": "10"}`), want{"op", "head", "attrs.out", "must be an integer"}},
		{"attr int as float", ed(`{"out": 10}`, `{"out": 10.5}`), want{"op", "head", "attrs.out", "must be an integer"}},
		{"attr bool as int", ed(`{"out": 10}`, `{"out": 10, "bias": 1}`), want{"op", "head", "attrs.bias", "true or false"}},
		{"attr zero", ed(`{"out": 10}`, `{"out": 0}`), want{"op", "head", "attrs.out", "positive"}},
		{"attr negative num", ed(`"num": 500`, `"num": -1`), want{"op", "tok.emb", "attrs.num", "positive"}},
		{"axis out of range", ed(`"inputs": ["img.act"], "attrs": {"axis": 0}`, `"inputs": ["img.act"], "attrs": {"axis": 2}`), want{"op", "img.pool", "attrs.axis", "out of range"}},
		// references and structure
		{"undefined input", ed(`"inputs": ["fuse"]`, `"inputs": ["fuse2"]`), want{"op", "head", "inputs", `input "fuse2" is not defined`}},
		{"self reference", ed(`"inputs": ["img.fc"]`, `"inputs": ["img.act"]`), want{"op", "img.act", "inputs", "own output"}},
		{"cycle", ed(`"inputs": ["image"]`, `"inputs": ["img.act"]`), want{"ops", `"img.fc" -> "img.act" -> "img.fc"`, "", "form a cycle"}},
		{"missing loss", ed(lossOp, `{"name": "loss", "op": "opaque", "inputs": ["head", "label"], "attrs": {"out_shape": [], "flops_fwd": 1}}`), want{"", "", "ops", "no loss"}},
		{"second loss", ed(lossOp, lossOp+`, {"name": "loss2", "op": "softmax_cross_entropy", "inputs": ["head", "label"]}`), want{"op", "loss2", "op", "second loss"}},
		{"dead op", ed(lossOp, lossOp+`, {"name": "spare", "op": "relu", "inputs": ["head"]}`), want{"op", "spare", "", "not on a path to the loss"}},
		{"loss feeding an op", ed(lossOp, lossOp+`, {"name": "after", "op": "relu", "inputs": ["loss"]}`), want{"op", "after", "", "not on a path to the loss"}},
		// arity, dtypes and shapes
		{"arity fixed", ed(`"inputs": ["fuse"]`, `"inputs": ["fuse", "fuse"]`), want{"op", "head", "inputs", "takes 1 input"}},
		{"arity at least", ed(fuseOp, `{"name": "fuse", "op": "add", "inputs": ["tok.pool"]}`), want{"op", "fuse", "inputs", "at least 2"}},
		{"arity at most", ed(fuseOp, `{"name": "fuse", "op": "mul", "inputs": ["tok.pool", "img.pool", "img.pool"]}`), want{"op", "fuse", "inputs", "takes 2"}},
		{"add shape mismatch", ed(fuseOp, `{"name": "fuse", "op": "add", "inputs": ["tok.pool", "img.fc"]}`), want{"op", "fuse", "inputs", "shape"}},
		{"concat mismatch", ed(fuseOp, `{"name": "fuse", "op": "concat", "inputs": ["tok.pool", "img.fc"]}`), want{"op", "fuse", "inputs", "does not match"}},
		{"float op on int32", ed(`"inputs": ["image"]`, `"inputs": ["tokens"]`), want{"op", "img.fc", "inputs", "want float32"}},
		{"embedding of floats", ed(tokIn, `{"name": "tokens", "shape": [16], "dtype": "float32"}`), want{"op", "tok.emb", "inputs", "want int32"}},
		{"index range past num", ed(`"num": 500`, `"num": 400`), want{"op", "tok.emb", "inputs", "outside [0, 400)"}},
		{"label past classes", ed(`"range": [0, 10]`, `"range": [0, 11]`), want{"op", "loss", "inputs", "classes"}},
		{"label float", ed(`{"name": "label",  "shape": [], "dtype": "int32", "range": [0, 10]}`, `{"name": "label", "shape": [], "dtype": "float32"}`), want{"op", "loss", "inputs", "want int32"}},
		{"logits rank", ed(`"inputs": ["fuse"],    "attrs": {"out": 10}`, `"inputs": ["img.act"],    "attrs": {"out": 10}`, fuseOp, fuseOp+`, {"name": "x", "op": "relu", "inputs": ["fuse"]}`), want{"op", "loss", "inputs", "want 1 dims"}},
		{"heads do not divide", ed(`"op": "gelu"`, `"op": "attention", "attrs": {"heads": 5}`), want{"op", "img.act", "attrs.heads", "divisible"}},
		{"attention rank", ed(`"op": "mean",       "inputs": ["tok.emb"], "attrs": {"axis": 0}`, `"op": "attention", "inputs": ["tok.pool0"], "attrs": {"heads": 2}`, embOp, embOp+`, {"name": "tok.pool0", "op": "mean", "inputs": ["tok.emb"], "attrs": {"axis": 0}}`), want{"op", "tok.pool", "inputs", "want 2 dims"}},
		{"bag rank", ed(`"op": "embedding",  "inputs": ["tokens"], "attrs": {"num": 500, "dim": 32}`, `"op": "embedding_bag", "inputs": ["tokens2"], "attrs": {"num": 500, "dim": 32}`, tokIn, tokIn+`, {"name": "tokens2", "shape": [4, 4], "dtype": "int32", "range": [0, 9]}`), want{"op", "tok.emb", "inputs", "want 1 dims"}},
		{"bag mode", ed(`"op": "embedding",  "inputs": ["tokens"], "attrs": {"num": 500, "dim": 32}`, `"op": "embedding_bag", "inputs": ["tokens"], "attrs": {"num": 500, "dim": 32, "mode": "max"}`), want{"op", "tok.emb", "attrs.mode", `"sum" or "mean"`}},
		{"dot dims", ed(fuseOp, `{"name": "fuse", "op": "dot_interaction", "inputs": ["tok.pool", "img.fc"]}`), want{"op", "fuse", "inputs", "want 1 dims"}},
		{"mse int target", ed(lossOp, `{"name": "loss", "op": "mse", "inputs": ["head", "label"]}`), want{"op", "loss", "inputs", "want float32"}},
		{"bce shapes", ed(lossOp, `{"name": "loss", "op": "bce_with_logits", "inputs": ["head", "fuse"]}`), want{"op", "loss", "inputs", "shape"}},
		{"opaque negative flops", ed(`"op": "gelu",       "inputs": ["img.fc"]`, `"op": "opaque", "inputs": ["img.fc"], "attrs": {"out_shape": [8, 32], "flops_fwd": -1}`), want{"op", "img.act", "attrs.flops_fwd", "≥ 0"}},
		{"opaque bad dtype", ed(`"op": "gelu",       "inputs": ["img.fc"]`, `"op": "opaque", "inputs": ["img.fc"], "attrs": {"out_shape": [8, 32], "flops_fwd": 1, "out_dtype": "bf16"}`), want{"op", "img.act", "attrs.out_dtype", "float32"}},
		{"opaque missing shape", ed(`"op": "gelu",       "inputs": ["img.fc"]`, `"op": "opaque", "inputs": ["img.fc"], "attrs": {"flops_fwd": 1}`), want{"op", "img.act", "attrs.out_shape", "required"}},
		// sizes that overflow int64
		{"param overflow", ed(`"num": 500, "dim": 32`, `"num": 4611686018427387904, "dim": 4`), want{"op", "tok.emb", "attrs", "overflows int64"}},
		{"activation overflow", ed(`"attrs": {"out": 32}`, `"attrs": {"out": 4611686018427387904}`), want{"op", "img.fc", "shape", "int64"}},
		{"opaque params overflow", ed(`"op": "gelu",       "inputs": ["img.fc"]`, `"op": "opaque", "inputs": ["img.fc"], "attrs": {"out_shape": [8, 32], "flops_fwd": 1, "params": 9223372036854775807}`), want{"op", "img.act", "attrs", "overflows int64"}},
		{"total params overflow", ed(`"op": "gelu",       "inputs": ["img.fc"]`, `"op": "opaque", "inputs": ["img.fc"], "attrs": {"out_shape": [8, 32], "flops_fwd": 1, "params": 1152921504606846976}`,
			`"op": "mean",       "inputs": ["img.act"], "attrs": {"axis": 0}`, `"op": "opaque", "inputs": ["img.act"], "attrs": {"out_shape": [32], "flops_fwd": 1, "params": 1152921504606846976}`), want{"", "", "ops", "overflows int64"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(tc.doc(t)))
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("got %v, want a refusal", err)
			}
			e := es[0]
			if e.Kind != tc.want.kind || e.Name != tc.want.name || e.Field != tc.want.field {
				t.Fatalf("first problem %q is (kind %q, name %q, field %q); want (%q, %q, %q)\nall:\n%v",
					e.Error(), e.Kind, e.Name, e.Field, tc.want.kind, tc.want.name, tc.want.field, err)
			}
			if !strings.Contains(e.Error(), tc.want.msg) {
				t.Fatalf("message %q does not say %q", e.Error(), tc.want.msg)
			}
			for _, line := range es {
				if strings.Contains(line.Error(), "\n") {
					t.Fatalf("problem %q spans lines", line.Error())
				}
			}
		})
	}
}

func raw(doc string) func(*testing.T) string { return func(*testing.T) string { return doc } }

func ed(pairs ...string) func(*testing.T) string {
	return func(t *testing.T) string { return edit(t, base(t), pairs...) }
}

func TestEveryProblemReported(t *testing.T) {
	doc := edit(t, base(t), `{"out": 10}`, `{"out": 0}`, `"op": "gelu"`, `"op": "swish"`, `"batch_size": 64`, `"batch_size": -1`)
	_, err := Load([]byte(doc))
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("got %v", err)
	}
	if len(es) != 2 { // batch_size and the unknown kind; the op's attrs are not read
		t.Errorf("got %d problems, want 2:\n%v", len(es), err)
	}
	text := err.Error()
	for _, want := range []string{"batch_size", `op "img.act": op: unknown operator`} {
		if !strings.Contains(text, want) {
			t.Errorf("problems do not mention %q:\n%s", want, text)
		}
	}
	if got := len(strings.Split(text, "\n")); got != len(es) {
		t.Errorf("%d lines for %d problems", got, len(es))
	}
	lines := es.Lines("m.json")
	if !strings.HasPrefix(lines[0], "m.json: ") {
		t.Errorf("line %q lacks the file name", lines[0])
	}
}

func TestCycleOfThree(t *testing.T) {
	doc := edit(t, base(t), `"inputs": ["image"]`, `"inputs": ["img.pool"]`)
	_, err := Load([]byte(doc))
	want := `ops "img.fc" -> "img.act" -> "img.pool" -> "img.fc" form a cycle`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}
