// Package profile measures what the planner prices: a device's compute,
// launch and copy costs, the links between workers on this host, each op's
// time through the stage executor, and this host's memory. It is the one
// place in the project that measures; `graphpipe profile` and the benchmarks
// call it.
//
// Measuring does I/O and reads clocks, so profile sits above runtime and
// stage, outside the deterministic planning core (dag, partition,
// microbatch, search): the core reads what profile wrote (a device profile,
// an op-times file) as bytes and never calls it. Nothing imports profile but
// cmd/graphpipe, bench and tests.
//
// The contract, by what is measured:
//
//   - A device (Measure, with CPUMeter or GPUMeter): GEMMs of growing size n
//     (2n³ FLOPs each, the fastest of a few runs after a warm-up) are fitted
//     to the cost model's compute term (FitCompute) for PeakFLOPs and
//     HalfWork with MaxEff 1; the bare kernel launch is timed over 1000 tiny
//     calls; Launch is the larger of it and the fixed cost of an op call
//     through the stage executor (a chain of 1-wide layers trained forward
//     and backward); MemBW is a large copy's bytes read and written per
//     second; Memory is the device's (the host's for the CPU). Links are
//     probed on the CPU (below) and fitted (WithLinks); one GPU cannot
//     measure links between GPUs, so they come from the nearest built-in
//     profile, which Result.LinksOf names. Measure returns the profile (a
//     plan.Device that validates) with every measurement beside it, and
//     writes its table and fit to the log it is given.
//   - Links (ProbeLinks, Transport): two runtime endpoints on their own
//     connections to an embedded NATS server on loopback, the path workers
//     on one host use. ProbeLinks bounces a message of each size back and
//     forth and returns the median round trip halved, the one-way seconds
//     the cost model's latency + bytes/bandwidth is fitted to (FitLink).
//     Transport streams messages one way and returns bytes per second
//     through the endpoints and through raw NATS publish→subscribe.
//   - Op times (MeasureOpTimes): stage.TimeOps runs the whole model forward,
//     backward for the inputs and backward for the weights at each
//     micro-batch size, and each op keeps its mean per pass, in the op-times
//     file format the planner reads (plan.OpTimes, validated).
//   - Host memory (HostMemory): MemTotal of /proc/meminfo, 0 when unknown;
//     TrainNeed and PlanNeed estimate what a run holds so that a command can
//     refuse one that does not fit (Fits).
//
// The fits (FitCompute, FitLink) are deterministic arithmetic: least squares
// on relative error of t = a + b·w, the cost model's time being linear in
// the work w. Every figure is in seconds, bytes and FLOPs.
package profile
