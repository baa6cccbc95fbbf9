package onnx

import (
	"errors"
	"strings"

	"github.com/graphpipe/graphpipe/dag"
)

// onnxAttrs names the ONNX attribute a graphpipe attribute is read from,
// where the names differ, so that a refusal names what the file says.
var onnxAttrs = map[string]string{
	"stride":   "strides",
	"dilation": "dilations",
	"kernel":   "kernel_shape",
	"padding":  "pads",
	"groups":   "group",
	"eps":      "epsilon",
}

// checkAttrs refuses attributes of kind that dag would refuse, naming the
// node and the ONNX attribute: a value the file gave (a stride of 0, a
// negative epsilon) is the file's fault, found before anything is sized
// with it, not a model that fails to validate after the import.
func (n *node) checkAttrs(kind dag.Kind, a dag.Attrs) error {
	err := dag.CheckAttrs(&dag.Op{Name: n.p.GetName(), Kind: kind, Attrs: a})
	var es dag.Errors
	if err == nil || !errors.As(err, &es) || len(es) == 0 {
		return err
	}
	e := es[0]
	attr := strings.TrimPrefix(e.Field, "attrs.")
	if name, ok := onnxAttrs[attr]; ok {
		attr = name
	}
	return n.refuse("attribute %s: %s", attr, e.Msg)
}

// checkEmitted checks the attributes of the ops a node emitted, from index
// first on: the handlers that do not check their own.
func (n *node) checkEmitted(first int) error {
	for _, op := range n.c.ops[first:] {
		if err := n.checkAttrs(op.Kind, op.Attrs); err != nil {
			return err
		}
	}
	return nil
}
