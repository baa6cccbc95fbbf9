package onnx

import (
	"fmt"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/onnx/onnxpb"
)

// defaultBatch is the batch_size of a model whose inputs' batch dim is
// symbolic, when --batch does not say.
const defaultBatch = 32

// graphInputs declares the graph inputs the needed nodes read (not the
// initializers, which older exporters list among the inputs too) and
// returns the model's batch size.
func (c *converter) graphInputs(nodes []*onnxpb.NodeProto) (int64, error) {
	read := map[string]string{} // a graph input → the first node that reads it
	for _, n := range nodes {
		for _, in := range n.GetInput() {
			if read[in] == "" {
				read[in] = n.GetName()
			}
		}
	}
	for _, o := range c.f.Model.Graph.GetOutput() {
		if read[o.GetName()] == "" {
			read[o.GetName()] = "the output"
		}
	}
	fixed := int64(0)
	var errs Errors
	for _, in := range c.f.Model.Graph.GetInput() {
		name := in.GetName()
		if _, isInit := c.f.inits[name]; isInit || read[name] == "" {
			continue
		}
		b, err := c.graphInput(in)
		if err != nil {
			if fe, ok := err.(*FileError); ok && read[name] != "the output" {
				fe.Msg += fmt.Sprintf(" (node %q reads it)", read[name])
			}
			errs = append(errs, err)
			continue
		}
		if b > 1 && fixed == 0 {
			fixed = b
		}
	}
	if len(errs) > 0 {
		return 0, errs
	}
	switch {
	case c.o.Batch > 0:
		return c.o.Batch, nil
	case fixed > 0:
		return fixed, nil
	}
	c.notes = append(c.notes, fmt.Sprintf("the inputs' batch dim is symbolic: batch_size %d (--batch sets another)", defaultBatch))
	return defaultBatch, nil
}

// graphInput declares one graph input; it returns its fixed batch dim (0
// when symbolic).
func (c *converter) graphInput(in *onnxpb.ValueInfoProto) (int64, error) {
	field := fmt.Sprintf("graph.input[%q]", in.GetName())
	tt := in.GetType().GetTensorType()
	if tt == nil {
		return 0, fileErrf(field, "is not a tensor")
	}
	et := dtype(tt.GetElemType())
	var dt dag.DType
	switch {
	case et == tFloat:
		dt = dag.Float32
	case et == tInt64 || et == tInt32:
		dt = dag.Int32
	default:
		return 0, fileErrf(field, "is %s; graphpipe's inputs are float32 or integer indices (export the model in float32)", et)
	}
	if tt.GetShape() == nil {
		return 0, fileErrf(field, "has no shape; graphpipe needs each sample's shape")
	}
	dims := tt.GetShape().GetDim()
	if len(dims) == 0 {
		return 0, fileErrf(field, "is a scalar; its first axis must be the batch")
	}
	var shape dag.Shape
	for i, d := range dims[1:] {
		if _, ok := d.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue); !ok || d.GetDimValue() <= 0 {
			return 0, fileErrf(field, "dim %d is %s; graphpipe needs every dim but the batch fixed (export with those dims fixed)", i+1, dimText(d))
		}
		shape = append(shape, d.GetDimValue())
	}
	if _, err := count(shape); err != nil {
		return 0, fileErrf(field, "%v", err)
	}
	name := c.name(in.GetName())
	c.inputs = append(c.inputs, dag.Input{Name: name, Shape: shape, DType: dt})
	c.vals[in.GetName()] = &value{kind: kAct, dims: append([]int64{1}, shape...), t: name, dtype: dt, j: 0, a: 1, b: 1, prod: -1}
	return dims[0].GetDimValue(), nil
}

func dimText(d *onnxpb.TensorShapeProto_Dimension) string {
	switch v := d.GetValue().(type) {
	case *onnxpb.TensorShapeProto_Dimension_DimParam:
		return fmt.Sprintf("symbolic (%q)", v.DimParam)
	case *onnxpb.TensorShapeProto_Dimension_DimValue:
		return fmt.Sprint(v.DimValue)
	}
	return "unknown"
}

// needRange narrows an integer input's range to [0, hi): it indexes a
// table of hi rows or labels hi classes.
func (c *converter) needRange(v *value, hi int64) {
	r := c.ranges[v.t]
	if r == nil {
		c.ranges[v.t] = &[2]int64{0, hi}
		return
	}
	r[1] = min(r[1], hi)
}

// setRanges gives every integer input its range; one without is refused
// by the model's validation, naming it.
func (c *converter) setRanges() {
	for i := range c.inputs {
		if r := c.ranges[c.inputs[i].Name]; r != nil && c.inputs[i].DType == dag.Int32 {
			c.inputs[i].Range = r
		}
	}
}
