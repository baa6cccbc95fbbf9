// Package dag owns the operator graph: the model file codec (graphpipe/model@1,
// ../shared/spec/model-json.md), ops and their per-sample shapes, validation,
// per-op costs, and the graph algorithms the planner builds on.
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
//  4. Write renders a Model canonically; Parse(Write(m)) builds a Graph equal to
//     Build(m), field for field.
//
// The package does no I/O beyond LoadFile and keeps no global state.
package dag
