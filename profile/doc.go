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
//   - What a run pays beside its ops (MeasureRunCosts, part of Measure;
//     plan.RunCosts): with workers that are processes of their own, as a
//     run's are (the program calls Child first thing, and measuring
//     children are this binary run again; elsewhere goroutines, and the
//     result says so), each with its share of the cores (GOMAXPROCS
//     cores/k), talking through an embedded server in the measuring
//     process as workers talk through their coordinator's: messages of a
//     few hundred bytes to megabytes between two workers (tensors encoded
//     as workers encode them), their mean round trip halved fitted to the
//     NATS path, the send call and the taking of a landed message fitted
//     to their costs at either end (means: an iteration pays for dozens of
//     messages, their tail as often as it comes); joins of 2 to cores+1
//     workers, k−1 branches each computing and sending to one join that
//     sends each a message back, every message's one-way time pooled per
//     k (the waits for cores that more workers on the host cause); the ring all-reduce
//     among 2 and 3 replicas, a step fitted; the coordinator's go to 1 to
//     cores+1 workers and their reports, the go's arrival at each (on the
//     host's clock) fitted to a delay and one per worker told before it,
//     what follows the last arrival to a cost and one per worker; and on
//     a CPU, a pass of the small MMT with k workers busy at once over one
//     with all the cores, k up to twice the cores, in rounds of every k
//     (the ratio's median over rounds: a round's counts share the load
//     from elsewhere; made never to fall with k). On a GPU (or the emulator), the same-host device
//     path: a device-to-device copy fitted, plus the NATS latency of its
//     handle.
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
