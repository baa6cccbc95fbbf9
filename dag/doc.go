// Package dag owns the operator graph: the model file codec
// (graphpipe/model@1 and @2, docs/model-format.md), ops and their per-sample
// shapes, parameters and buffers with their names, validation, per-op
// costs, and the graph algorithms the planner builds on.
//
// The contract, for a caller:
//
//  1. Bytes come in through Parse (or LoadFile); a *Model is the document as
//     written, with every attribute resolved to its default. A Model may also be
//     built in code (package models does).
//  2. Build validates a Model and returns a *Graph, or an Errors value with one
//     *Error per problem, each naming the input or op and the field at fault.
//     Nothing in this package panics on bad input; a panic is a programmer error.
//  3. A *Graph is immutable. It answers shapes (Tensor), a deterministic
//     topological order (Order), per-op costs (Cost), reachability and the
//     parallel branches of the model (Branches).
//  4. Write renders a Model canonically, in its own format version;
//     Parse(Write(m)) builds a Graph equal to Build(m), field for field. A @1
//     model renders byte for byte as it did before @2 existed.
//  5. Every parameter and buffer has one name in the model (Param.Key: the
//     op's params entry, or "<op>.<slot>"), unique across the model; that
//     name is what init files, checkpoints, dumps and exports use.
//
// Every kind is one row of the operator table (kinds.go): the format version
// it arrived in, its attributes, checks, shape inference, parameters and
// cost side by side; docs/adding-an-op.md says how to add one.
//
// The package does no I/O beyond LoadFile and keeps no global state.
package dag
