package onnx

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/onnx/onnxpb"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor"
)

var update = flag.Bool("update", false, "rewrite testdata/backend.golden")

// backendDir is where Debian's libonnx-testdata puts ONNX's backend node
// tests (GRAPHPIPE_ONNX_TESTDATA overrides it).
func backendDir() string {
	if d := os.Getenv("GRAPHPIPE_ONNX_TESTDATA"); d != "" {
		return d
	}
	return "/usr/share/libonnx-testdata/data/node"
}

// TestBackendNodeTests runs ONNX's own backend node tests for every op type
// the importer maps: a case's first input is fed per sample (its first axis
// the batch), its other inputs become weights, and graphpipe's forward pass
// must match output_0.pb within 1e-4 (relative to the output's largest
// value), or the import must refuse the case and say why. Every case's
// outcome is in testdata/backend.golden (-update rewrites it).
func TestBackendNodeTests(t *testing.T) {
	dir := backendDir()
	if _, err := os.Stat(dir); err != nil {
		if os.Getenv("GRAPHPIPE_REQUIRE_ONNX_TESTDATA") != "" {
			t.Fatalf("ONNX's backend tests are not at %s (apt-get install libonnx-testdata): %v", dir, err)
		}
		t.Skipf("ONNX's backend tests are not at %s (apt-get install libonnx-testdata)", dir)
	}
	cases, _ := filepath.Glob(filepath.Join(dir, "test_*"))
	supported := map[string]bool{}
	for _, op := range SupportedOps() {
		supported[op] = true
	}
	var lines []string
	tally := map[string]*[3]int{} // op type → passed, refused, wrong
	for _, c := range cases {
		m, err := readModel(filepath.Join(c, "model.onnx"))
		if err != nil || !mapped(m, supported) {
			continue
		}
		op := m.Graph.Node[0].GetOpType()
		if tally[op] == nil {
			tally[op] = &[3]int{}
		}
		outcome, problem := runCase(c, m)
		switch {
		case problem != "":
			tally[op][2]++
			t.Errorf("%s: %s", filepath.Base(c), problem)
			outcome = "WRONG " + problem
		case strings.HasPrefix(outcome, "pass"):
			tally[op][0]++
		default:
			tally[op][1]++
		}
		lines = append(lines, fmt.Sprintf("%s: %s", filepath.Base(c), outcome))
	}
	var ops []string
	total := [3]int{}
	for op, n := range tally {
		ops = append(ops, fmt.Sprintf("%-26s passed %3d  refused %3d", op, n[0], n[1]))
		for i := range total {
			total[i] += n[i]
		}
	}
	sort.Strings(ops)
	t.Logf("ONNX backend node tests by op type:\n%s\nin all: %d passed, %d refused, %d wrong", strings.Join(ops, "\n"), total[0], total[1], total[2])
	if total[0] < 110 {
		t.Errorf("only %d cases passed", total[0])
	}
	golden(t, "testdata/backend.golden", strings.Join(lines, "\n")+"\n")
}

// golden compares text with a golden file, or rewrites it with -update.
func golden(t *testing.T, path, text string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if string(want) != text {
		t.Errorf("%s differs from this run (go test -update rewrites it after a deliberate change):\n%s", path, diff(string(want), text))
	}
}

func diff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	in := map[string]bool{}
	for _, l := range al {
		in[l] = true
	}
	var out []string
	for _, l := range bl {
		if !in[l] {
			out = append(out, "+ "+l)
		}
	}
	in = map[string]bool{}
	for _, l := range bl {
		in[l] = true
	}
	for _, l := range al {
		if !in[l] {
			out = append(out, "- "+l)
		}
	}
	if len(out) > 40 {
		out = append(out[:40], "...")
	}
	return strings.Join(out, "\n")
}

func readModel(path string) (*onnxpb.ModelProto, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := &onnxpb.ModelProto{}
	return m, proto.Unmarshal(data, m)
}

// mapped reports whether every node of m is of an op type the importer maps.
func mapped(m *onnxpb.ModelProto, supported map[string]bool) bool {
	if m.Graph == nil || len(m.Graph.Node) == 0 {
		return false
	}
	for _, n := range m.Graph.Node {
		if n.GetDomain() != "" || !supported[n.GetOpType()] {
			return false
		}
	}
	return true
}

func readTensor(path string) (*onnxpb.TensorProto, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	tp := &onnxpb.TensorProto{}
	return tp, proto.Unmarshal(data, tp)
}

// runCase imports and runs one backend case. It returns the outcome
// ("pass ..." or "refused: ...") or, when graphpipe computed something
// else than ONNX's reference, the problem.
func runCase(dir string, m *onnxpb.ModelProto) (outcome, problem string) {
	set := filepath.Join(dir, "test_data_set_0")
	if len(m.Graph.Input) == 0 {
		return "refused: the case has no input to feed", ""
	}
	// inputs after the first become weights, with the case's values
	for i := 1; i < len(m.Graph.Input); i++ {
		tp, err := readTensor(filepath.Join(set, fmt.Sprintf("input_%d.pb", i)))
		if err != nil {
			return "refused: input " + m.Graph.Input[i].GetName() + " has no value", ""
		}
		tp.Name = proto.String(m.Graph.Input[i].GetName())
		m.Graph.Initializer = append(m.Graph.Initializer, tp)
	}
	m.Graph.Input = m.Graph.Input[:1]
	data, _ := proto.Marshal(m)
	f, err := Read(data, dir, "model.onnx")
	if err != nil {
		return "refused: " + err.Error(), ""
	}
	in0, err := readTensor(filepath.Join(set, "input_0.pb"))
	if err != nil {
		return "", err.Error()
	}
	want, err := readTensor(filepath.Join(set, "output_0.pb"))
	if err != nil {
		return "", err.Error()
	}
	batch := int64(1)
	if len(in0.Dims) > 0 {
		batch = in0.Dims[0]
	}
	res, err := Import(f, Options{Loss: dag.MSE, Batch: batch, Output: m.Graph.Output[0].GetName()})
	if err != nil {
		return "refused: " + firstLine(err.Error()), ""
	}
	got, err := forward(res, in0)
	if err != nil {
		return "refused at run time: " + firstLine(err.Error()), ""
	}

	ws, err := (&stored{t: want, dtype: dtype(want.GetDataType()), dims: want.Dims, n: elemsOf(want.Dims)}).floats()
	if err != nil {
		return "", "output_0.pb: " + err.Error()
	}
	if len(ws) != len(got) {
		return "", fmt.Sprintf("%d values, ONNX's reference has %d", len(got), len(ws))
	}
	scale, worst := 1e-6, 0.0
	for i := range ws {
		scale = math.Max(scale, math.Abs(ws[i]))
		if math.IsNaN(ws[i]) != math.IsNaN(float64(got[i])) {
			return "", fmt.Sprintf("value %d is %v, ONNX's reference %v", i, got[i], ws[i])
		}
		if !math.IsNaN(ws[i]) {
			worst = math.Max(worst, math.Abs(float64(got[i])-ws[i]))
		}
	}
	if worst > 1e-4*scale {
		if why := byDesign(m); why != "" {
			return "refused: " + why, ""
		}
		return "", fmt.Sprintf("differs from ONNX's reference by %.3g (largest value %.3g)", worst, scale)
	}
	return fmt.Sprintf("pass (%d ops)", len(res.Model.Ops)-1), ""
}

func elemsOf(dims []int64) int64 {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	return n
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " (and more)"
	}
	return s
}

// forward runs an imported one-output model forward on a batch: the value
// its loss reads.
func forward(res *Result, in0 *onnxpb.TensorProto) ([]float32, error) {
	g, err := dag.Build(res.Model)
	if err != nil {
		return nil, err
	}
	all := make([]int, g.NumOps())
	for i := range all {
		all[i] = i
	}
	ex, err := stage.NewExecutor(g, all, 0)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := res.WriteWeights(&buf); err != nil {
		return nil, err
	}
	entries, _, err := tensor.DecodeSafetensors(buf.Bytes())
	if err != nil {
		return nil, err
	}
	vals, problems := stage.StateOf(g, entries)
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s", problems[0])
	}
	ex.LoadState(vals)
	x := g.Inputs()[0]
	s := &stored{t: in0, dtype: dtype(in0.GetDataType()), dims: in0.Dims, n: elemsOf(in0.Dims)}
	fs, err := s.floats()
	if err != nil {
		return nil, err
	}
	n := int(in0.Dims[0])
	feeds := map[string]*stage.Value[float32]{}
	v := &stage.Value[float32]{Shape: append([]int{n}, toInts(x.Shape)...)}
	if x.DType == dag.Int32 {
		for _, f := range fs {
			v.Ints = append(v.Ints, int32(f))
		}
	} else {
		for _, f := range fs {
			v.Data = append(v.Data, float32(f))
		}
	}
	feeds[x.Name] = v
	lossOp := g.Op(g.Loss())
	target := g.Tensor(lossOp.Inputs[1])
	feeds[target.Name] = stage.NewValue[float32](append([]int{n}, toInts(target.Shape)...)...)
	out, err := ex.Forward(0, stage.Position{}, feeds)
	if err != nil {
		return nil, err
	}
	y := out[lossOp.Inputs[0]]
	if y == nil { // the output is the input itself (an Identity case)
		return v.Data, nil
	}
	return y.Data, nil
}

func toInts(s dag.Shape) []int {
	out := make([]int, len(s))
	for i, d := range s {
		out[i] = int(d)
	}
	return out
}

// byDesign says why a case's reference cannot be graphpipe's result: a
// BatchNormalization exported for inference (graphpipe trains, normalising
// by the batch), or a dropout in training mode (graphpipe draws its own
// masks, from (seed, step, op, sample)).
func byDesign(m *onnxpb.ModelProto) string {
	for _, n := range m.Graph.Node {
		switch n.GetOpType() {
		case "BatchNormalization":
			training := false
			for _, a := range n.Attribute {
				training = training || a.GetName() == "training_mode" && a.GetI() != 0
			}
			if !training {
				return "an inference-mode BatchNormalization: graphpipe's batch_norm trains, normalising by the batch"
			}
		case "Dropout":
			if len(n.Input) > 2 && n.Input[2] != "" {
				return "a training-mode Dropout: graphpipe draws its own masks, from (seed, step, op, sample)"
			}
		}
	}
	return ""
}
