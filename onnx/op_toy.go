//go:build toyop

package onnx

import "github.com/graphpipe/graphpipe/dag"

// A made-up ONNX op type Scale2 read as the toy operator dag.Scale2 (the
// toyop build tag): one row of the table, an existing handler.
func init() { ops["Scale2"] = opSpec{handle: unaryOp(dag.Scale2), opsets: every} }
