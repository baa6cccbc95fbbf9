package onnx

import (
	"fmt"
	"strings"
)

// NodeError is a node the importer cannot take.
type NodeError struct {
	Node   string // the node's name, or how to find it when it has none
	OpType string
	Domain string // "" is ONNX's default domain
	Opset  int64
	Msg    string
}

func (e *NodeError) Error() string {
	dom := e.Domain
	if dom == "" {
		dom = "ai.onnx"
	}
	return fmt.Sprintf("node %q (%s, domain %s, opset %d): %s", e.Node, e.OpType, dom, e.Opset, e.Msg)
}

// FileError is a problem with the file or a part of the graph that is not a
// node: its field, and what is wrong.
type FileError struct {
	Field string // e.g. "ir_version", "graph.initializer[\"fc.weight\"]", "graph.input[\"x\"]"
	Msg   string
}

func (e *FileError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Errors is every problem found, one per line.
type Errors []error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

func fileErrf(field, format string, args ...any) *FileError {
	return &FileError{Field: field, Msg: fmt.Sprintf(format, args...)}
}
