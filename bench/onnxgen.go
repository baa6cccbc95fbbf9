package bench

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/graphpipe/graphpipe/onnx/onnxpb"
)

// TransformerSpec is a GPT-like classifier to write as an ONNX file.
type TransformerSpec struct {
	Layers, Width, Heads, Vocab, Seq, Classes int
}

// Params is its parameter count.
func (t TransformerSpec) Params() int64 {
	e := int64(t.Width)
	layer := 2*2*e + (3*e*e + 3*e) + (e*e + e) + (4*e*e + 4*e) + (4*e*e + e)
	return int64(t.Vocab)*e + int64(t.Seq)*e + int64(t.Layers)*layer + 2*e + int64(t.Classes)*(e+1)
}

// onnxWriter builds a graph the way PyTorch's exporter writes one, with its
// weights in one external data file beside the model.
type onnxWriter struct {
	g      *onnxpb.GraphProto
	data   *bufio.Writer
	file   string // the external data file's name
	off    int64
	rng    uint32
	consts int
}

// tensor writes a weight's values to the external data file and declares
// it: fill < 0 draws small pseudo-random values, otherwise every value is fill.
func (w *onnxWriter) weight(name string, fill float32, dims ...int64) (string, error) {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	var b [4]byte
	for i := int64(0); i < n; i++ {
		v := fill
		if fill < 0 {
			w.rng ^= w.rng << 13
			w.rng ^= w.rng >> 17
			w.rng ^= w.rng << 5
			v = (float32(w.rng)/math.MaxUint32 - 0.5) * 0.04
		}
		binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
		if _, err := w.data.Write(b[:]); err != nil {
			return "", err
		}
	}
	w.g.Initializer = append(w.g.Initializer, &onnxpb.TensorProto{Name: proto.String(name), Dims: dims,
		DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), DataLocation: onnxpb.TensorProto_EXTERNAL.Enum(),
		ExternalData: []*onnxpb.StringStringEntryProto{
			{Key: proto.String("location"), Value: proto.String(w.file)},
			{Key: proto.String("offset"), Value: proto.String(strconv.FormatInt(w.off, 10))},
			{Key: proto.String("length"), Value: proto.String(strconv.FormatInt(4*n, 10))}}})
	w.off += 4 * n
	return name, nil
}

// node adds a node; its output is named after it.
func (w *onnxWriter) node(op, name string, ins []string, attrs ...*onnxpb.AttributeProto) string {
	w.g.Node = append(w.g.Node, &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String(name), Input: ins,
		Output: []string{name}, Attribute: attrs})
	return name
}

// constant adds a Constant node holding a float scalar or int64s.
func (w *onnxWriter) constant(f float32, ints ...int64) string {
	w.consts++
	t := &onnxpb.TensorProto{DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), FloatData: []float32{f}}
	if ints != nil {
		t = &onnxpb.TensorProto{DataType: proto.Int32(int32(onnxpb.TensorProto_INT64)), Dims: []int64{int64(len(ints))}, Int64Data: ints}
	}
	return w.node("Constant", fmt.Sprintf("Constant_%d", w.consts), nil, &onnxpb.AttributeProto{Name: proto.String("value"),
		Type: onnxpb.AttributeProto_TENSOR.Enum(), T: t})
}

func ints(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

func intAttr(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

// linear is MatMul by an [in, out] weight plus a bias, as the exporter
// writes nn.Linear on a 3-D input.
func (w *onnxWriter) linear(prefix, x string, in, out int64) (string, error) {
	wt, err := w.weight(prefix+".weight", -1, in, out)
	if err != nil {
		return "", err
	}
	b, err := w.weight(prefix+".bias", 0, out)
	if err != nil {
		return "", err
	}
	return w.node("Add", prefix+"/Add", []string{w.node("MatMul", prefix+"/MatMul", []string{x, wt}), b}), nil
}

func (w *onnxWriter) layerNorm(prefix, x string, e int64) (string, error) {
	s, err := w.weight(prefix+".weight", 1, e)
	if err != nil {
		return "", err
	}
	b, err := w.weight(prefix+".bias", 0, e)
	if err != nil {
		return "", err
	}
	eps := &onnxpb.AttributeProto{Name: proto.String("epsilon"), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: proto.Float32(1e-5)}
	return w.node("LayerNormalization", prefix+"/LayerNormalization", []string{x, s, b}, intAttr("axis", -1), eps), nil
}

func (w *onnxWriter) gelu(prefix, x string) string {
	d := w.node("Div", prefix+"/Div", []string{x, w.constant(float32(math.Sqrt2))})
	e := w.node("Erf", prefix+"/Erf", []string{d})
	a := w.node("Add", prefix+"/Add", []string{e, w.constant(1)})
	m := w.node("Mul", prefix+"/Mul", []string{x, a})
	return w.node("Mul", prefix+"/Mul_1", []string{m, w.constant(0.5)})
}

// block is one pre-norm transformer layer.
func (w *onnxWriter) block(l int, x string, t TransformerSpec) (string, error) {
	e, h := int64(t.Width), int64(t.Heads)
	p := fmt.Sprintf("h.%d", l)
	ln1, err := w.layerNorm(p+".ln_1", x, e)
	if err != nil {
		return "", err
	}
	qkv, err := w.linear(p+".attn.c_attn", ln1, e, 3*e)
	if err != nil {
		return "", err
	}
	w.g.Node = append(w.g.Node, &onnxpb.NodeProto{OpType: proto.String("Split"), Name: proto.String(p + "/attn/Split"),
		Input: []string{qkv, w.constant(0, e, e, e)}, Output: []string{p + "/q", p + "/k", p + "/v"}, Attribute: []*onnxpb.AttributeProto{intAttr("axis", 2)}})
	heads := func(v string, perm ...int64) string {
		r := w.node("Reshape", v+"/Reshape", []string{v, w.constant(0, 0, 0, h, e/h)})
		return w.node("Transpose", v+"/Transpose", []string{r}, ints("perm", perm...))
	}
	q, k, v := heads(p+"/q", 0, 2, 1, 3), heads(p+"/k", 0, 2, 3, 1), heads(p+"/v", 0, 2, 1, 3)
	s := w.node("MatMul", p+"/attn/MatMul", []string{q, k})
	s = w.node("Div", p+"/attn/Div", []string{s, w.constant(float32(math.Sqrt(float64(e / h))))})
	s = w.node("Softmax", p+"/attn/Softmax", []string{s}, intAttr("axis", -1))
	o := w.node("MatMul", p+"/attn/MatMul_1", []string{s, v})
	o = w.node("Transpose", p+"/attn/Transpose", []string{o}, ints("perm", 0, 2, 1, 3))
	o = w.node("Reshape", p+"/attn/Reshape", []string{o, w.constant(0, 0, 0, e)})
	if o, err = w.linear(p+".attn.c_proj", o, e, e); err != nil {
		return "", err
	}
	x = w.node("Add", p+"/Add", []string{x, o})
	ln2, err := w.layerNorm(p+".ln_2", x, e)
	if err != nil {
		return "", err
	}
	f, err := w.linear(p+".mlp.c_fc", ln2, e, 4*e)
	if err != nil {
		return "", err
	}
	if f, err = w.linear(p+".mlp.c_proj", w.gelu(p+"/mlp/gelu", f), 4*e, e); err != nil {
		return "", err
	}
	return w.node("Add", p+"/Add_1", []string{x, f}), nil
}

// WriteTransformer writes a GPT-like classifier as dir/transformer.onnx
// with its weights in dir/transformer.weights (external data), streamed:
// the weights are never all in memory. It returns the model's path and the
// weights' bytes.
func WriteTransformer(dir string, t TransformerSpec) (string, int64, error) {
	df, err := os.Create(filepath.Join(dir, "transformer.weights"))
	if err != nil {
		return "", 0, err
	}
	defer df.Close()
	w := &onnxWriter{g: &onnxpb.GraphProto{Name: proto.String("transformer")}, data: bufio.NewWriterSize(df, 4<<20), file: "transformer.weights", rng: 2463534242}
	e, seq := int64(t.Width), int64(t.Seq)
	batch := &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: "batch"}}
	w.g.Input = []*onnxpb.ValueInfoProto{{Name: proto.String("ids"), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{
		ElemType: proto.Int32(int32(onnxpb.TensorProto_INT64)), Shape: &onnxpb.TensorShapeProto{Dim: []*onnxpb.TensorShapeProto_Dimension{batch,
			{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: seq}}}}}}}}}
	wte, err := w.weight("wte.weight", -1, int64(t.Vocab), e)
	if err != nil {
		return "", 0, err
	}
	wpe, err := w.weight("wpe", -1, seq, e)
	if err != nil {
		return "", 0, err
	}
	x := w.node("Add", "Add", []string{w.node("Gather", "wte/Gather", []string{wte, "ids"}), wpe})
	for l := 0; l < t.Layers; l++ {
		if x, err = w.block(l, x, t); err != nil {
			return "", 0, err
		}
	}
	if x, err = w.layerNorm("ln_f", x, e); err != nil {
		return "", 0, err
	}
	x = w.node("ReduceMean", "pool/ReduceMean", []string{x}, ints("axes", 1), intAttr("keepdims", 0))
	hw, err := w.weight("head.weight", -1, int64(t.Classes), e)
	if err != nil {
		return "", 0, err
	}
	hb, err := w.weight("head.bias", 0, int64(t.Classes))
	if err != nil {
		return "", 0, err
	}
	w.node("Gemm", "head/Gemm", []string{x, hw, hb}, intAttr("transB", 1))
	w.g.Output = []*onnxpb.ValueInfoProto{{Name: proto.String("head/Gemm")}}
	if err := w.data.Flush(); err != nil {
		return "", 0, err
	}
	m := &onnxpb.ModelProto{IrVersion: proto.Int64(8), ProducerName: proto.String("graphpipe bench"),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Version: proto.Int64(17)}}, Graph: w.g}
	b, err := proto.Marshal(m)
	if err != nil {
		return "", 0, err
	}
	path := filepath.Join(dir, "transformer.onnx")
	return path, w.off, os.WriteFile(path, b, 0o644)
}
