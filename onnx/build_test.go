package onnx

import (
	"encoding/binary"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/graphpipe/graphpipe/onnx/onnxpb"
)

// Small ONNX graphs built in Go for the importer's tests.

func tensorInput(name string, elem dtype, dims ...any) *onnxpb.ValueInfoProto {
	var ds []*onnxpb.TensorShapeProto_Dimension
	for _, d := range dims {
		switch d := d.(type) {
		case int:
			ds = append(ds, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(d)}})
		case string:
			ds = append(ds, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: d}})
		}
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(elem)), Shape: &onnxpb.TensorShapeProto{Dim: ds}}}}}
}

func floatInit(name string, dims []int64, vals ...float32) *onnxpb.TensorProto {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	raw := make([]byte, 4*n)
	for i := int64(0); i < n; i++ {
		v := float32(i%7) * 0.1
		if len(vals) > 0 {
			v = vals[int(i)%len(vals)]
		}
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	return &onnxpb.TensorProto{Name: proto.String(name), Dims: dims, DataType: proto.Int32(int32(tFloat)), RawData: raw}
}

func intInit(name string, vals ...int64) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), Dims: []int64{int64(len(vals))}, DataType: proto.Int32(int32(tInt64)), Int64Data: vals}
}

func nodeOf(op, name string, ins, outs []string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String(name), Input: ins, Output: outs, Attribute: attrs}
}

func intsAttr(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

func intAttr(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

func model(inputs []*onnxpb.ValueInfoProto, inits []*onnxpb.TensorProto, nodes []*onnxpb.NodeProto, outputs ...string) *onnxpb.ModelProto {
	var outs []*onnxpb.ValueInfoProto
	for _, o := range outputs {
		outs = append(outs, &onnxpb.ValueInfoProto{Name: proto.String(o)})
	}
	return &onnxpb.ModelProto{IrVersion: proto.Int64(8), OpsetImport: []*onnxpb.OperatorSetIdProto{{Version: proto.Int64(17)}},
		Graph: &onnxpb.GraphProto{Name: proto.String("test"), Input: inputs, Initializer: inits, Node: nodes, Output: outs}}
}

func marshal(m *onnxpb.ModelProto) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}
