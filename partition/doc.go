// Package partition owns stage graphs and the series-parallel decomposition
// the planner walks.
//
// Decompose turns any model DAG into an SP tree whose leaves are blocks of ops
// (one op, or a run of consecutive ops merged by coarsening):
//
//  1. A set of ops that splits into weakly connected pieces is a Parallel node.
//  2. A connected set with spine ops (ops every other op of the set comes
//     before or after) is a Series node: the spine ops and the pieces between
//     consecutive spine ops, in topological order.
//  3. A connected set with neither (not series-parallel, e.g. an N-shaped
//     graph) is cut in two at the prefix of its topological order that the
//     fewest edges cross: a Series of the prefix and the rest. This adds
//     ordering between the two halves (the prefix's stages run before the
//     rest's) and removes none, so the graph computes exactly what it did;
//     the planner only loses the plans that would interleave the halves.
//     Decompose reports how many such cuts it made.
//
// A StageGraph is a partition of the ops into stages. NewStageGraph checks
// that every op is in exactly one stage, that every stage is convex (no path
// leaves it and comes back) and that the stages form a DAG; every op edge that
// crosses stages becomes a stage edge carrying that op's output.
//
// The package is deterministic and does no I/O.
package partition
