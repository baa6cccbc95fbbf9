// Package bench holds the comparison benchmarks: graph pipelines against the
// best sequential pipelines on the paper's models, measured in one run, every
// comparison a ratio of figures that run produced.
//
// The planner comparison (planner.go) is simulated: plans from package search,
// iteration times from package microbatch's simulator. Its batch rule: for
// each model and device count, the global batch is the largest power of two
// (at most 65536) at which the sequential baseline can hold the whole batch in
// flight, that is, spp with a GPipe schedule still fits in device memory. That
// is what "a batch near the memory limit" meant for GPipe-era pipelines; both
// planners then run 1F1B at that batch. A sweep over the batch is reported
// beside it, since every pipeline's bubble shrinks as the batch grows.
//
// Run: make bench (Go benchmarks; figures through b.ReportMetric).
package bench
