// Package bench holds the comparison benchmarks: graph pipelines against the
// best sequential pipelines on the paper's models, measured in one run, every
// comparison a ratio of figures that run produced.
//
// The planner comparison (planner.go) is simulated: plans from package search,
// iteration times from package microbatch's simulator. Every table states its
// batch rule in its caption. The report opens with the batch sweep at 32
// v100 (4 to 2048 samples per device) and two headline tables: 16 samples per
// device for every model (the setting of the paper's Fig. 7), and each
// model's own default batch. A section keeps the GPipe-fit rule: for each
// model and device count, the largest power of two (at most 65536) at which
// the sequential baseline can hold the whole batch in flight, that is, spp
// with a GPipe schedule still fits in device memory ("a batch near the memory
// limit" for GPipe-era pipelines); both planners then run 1F1B at that batch.
//
// Charts are drawn with gonum/plot (package chart) as SVG and PNG; Axes names
// each chart's axis titles, which a test finds in the committed files.
//
// Run: make bench (Go benchmarks; figures through b.ReportMetric).
package bench
