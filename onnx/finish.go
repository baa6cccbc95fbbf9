package onnx

import (
	"fmt"

	"github.com/graphpipe/graphpipe/dag"
)

// finish appends the loss to the trained output (or keeps the graph's
// own), and checks the integer inputs found their ranges.
func (c *converter) finish(out string) error {
	v := c.vals[out]
	if v == nil {
		return fileErrf(fmt.Sprintf("graph.output[%q]", out), "was not computed")
	}
	if err := c.lossOn(out, v); err != nil {
		return err
	}
	for _, in := range c.inputs {
		if in.DType == dag.Int32 && in.Range == nil && c.ranges[in.Name] == nil {
			return fileErrf(fmt.Sprintf("graph.input[%q]", in.Name), "holds integers but feeds no embedding and no loss; graphpipe reads integers only as indices and labels")
		}
	}
	return nil
}

func (c *converter) lossOn(out string, v *value) error {
	if c.loss != "" && v.t == c.loss {
		if c.o.Loss != "" {
			return fileErrf("--loss", "the graph already ends in a loss (%q); leave --loss out", out)
		}
		return nil
	}
	if c.o.Loss == "" {
		return fileErrf("--loss", "the graph outputs predictions (%q); say which loss to train them with: --loss softmax_cross_entropy, mse or bce_with_logits", out)
	}
	if v.kind != kAct || v.dtype != dag.Float32 || !v.batchFirst() {
		why := ""
		switch {
		case v.kind == kAct && v.from != "" && v.j > 0:
			why = fmt.Sprintf(" (node %q left it in axis %d)", v.from, v.j)
		case v.kind == kAct && v.from != "" && v.j == 0:
			why = fmt.Sprintf(" (node %q merged it with another axis)", v.from)
		}
		return fileErrf(fmt.Sprintf("graph.output[%q]", out), "does not hold the batch in axis 0 alone%s, so no loss can be appended per sample", why)
	}
	shape := v.canon()
	label := dag.Input{Name: c.o.Label, Shape: shape, DType: dag.Float32}
	switch c.o.Loss {
	case dag.SoftmaxCrossEntropy:
		if len(shape) != 1 {
			return fileErrf("--loss", "softmax_cross_entropy needs logits [N, classes]; output %q is [N, %s]", out, trimShape(shape))
		}
		label.Shape, label.DType, label.Range = dag.Shape{}, dag.Int32, &[2]int64{0, shape[0]}
	case dag.MSE, dag.BCEWithLogits:
	default:
		return fileErrf("--loss", "unknown loss %q (known: softmax_cross_entropy, mse, bce_with_logits)", c.o.Loss)
	}
	if c.names[c.o.Label] {
		return fileErrf("--label", "%q is already the name of an input or op of the model", c.o.Label)
	}
	c.names[c.o.Label] = true
	c.inputs = append(c.inputs, label)
	c.emit("loss", c.o.Loss, []string{v.t, c.o.Label}, attrs(c.o.Loss, nil), nil)
	return nil
}

func trimShape(s dag.Shape) string {
	t := s.String()
	return t[1 : len(t)-1]
}
