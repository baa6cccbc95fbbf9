// Package search owns the cost model and the planners; the plans it makes
// are package plan's.
//
// # Contract
//
//  1. Search(g, Options) returns the fastest plan it finds, predicted by the
//     simulator (package microbatch) running the plan's own action lists, or
//     a NoPlanError saying which limit failed, an OptionError naming the flag
//     at fault, or a LimitError when spp-exact stops at its size limit. A
//     gpp plan's SearchReport.Sequential sums up the best sequential plan
//     the search found, exactly what strategy spp returns, so that every
//     search says what the graph pipeline gains.
//  2. The search is deterministic: the same graph and options give the same
//     plan. Micro-batch sizes are searched in parallel and combined in order.
//  3. The plan it returns is a plan.Plan (graphpipe/plan@1): package plan
//     owns the plan file, its checks at load, the device profile file and
//     the op-times file, the contract search shares with the runtime.
//     search keeps the cost model's arithmetic over a profile and op times.
//
// # Planners
//
// gpp binary-searches T, the time per micro-batch of the slowest stage, over
// the exact set of candidate stage times (so the optimum is exact and can be
// checked against brute force), at every micro-batch size b (the powers of
// two that divide the batch, and the batch). For each T a memoised DP over the
// series-parallel tree of the graph (package partition) answers the fewest
// micro-batches in flight at the entry of a subproblem (dp.go maps each
// recurrence to its file):
//
//	solve(n, k, δ)     n on exactly k devices with δ stages after it:
//	                   δ+1 if all of n fits as one stage on k devices (data
//	                   parallel), else series or group below
//	suffix(S, i, k, δ) units i.. of series node S: a first stage of units
//	                   i..p on k1 devices (or kid i solved on its own) with
//	                   after = suffix(S, p+1, k-k1, δ) stages after it; the
//	                   later part is solved first because a stage's in-flight
//	                   count depends on what follows it
//	group(P, i, k, δ)  kids i.. of parallel node P side by side: kids i..p
//	                   merged as one stage, or kid i solved alone, on k1
//	                   devices; the rest on k-k1; the value is the larger
//
// Join absorption (ours, not the paper's): when a series continues after a
// parallel node (branches, then concat, head, loss), the units after it may be
// merged into the sink stage of one branch (the host) instead of taking a
// device of their own; the other branches feed that stage. The merged stage is
// convex because the tail only reads the branches' outputs. Without it the
// paper's MMT on 32 devices gives 31 devices to 4 branches of 8 layers and the
// tail 1, and one branch must double up layers.
//
// Fork absorption (ours too), the mirror image: the unit before a parallel
// node (a stem feeding the branches) may share the source stage of one
// branch instead of taking a device of their own, with or without a join
// absorbed into another branch's sink. One unit, not any run of them: every
// run multiplied the candidate stages, and the search time with them, for
// the same plans. That stage comes first, so its in-flight count is one more
// than the deepest entry of everything after it, known only once the
// branches are planned: the DP asks, for growing c, whether the branches fit
// with every entry at most c and the stem's stage fitting at c+1
// (dpfork.go). It narrows the DP's gap to the best of all convex stage
// graphs on the oracle's random DAGs; what is left needs stages the SP tree
// does not offer: branches merged out of cost order, or the first ops of
// several branches in one stage. The paper's models start their branches at
// model inputs, so they have no stem and their plans are unchanged.
// BENCHMARKS.md's "Planner history" has the figures behind this and the
// paragraphs below: what each choice cost and gained when it was made.
//
// Parallel children are ordered by descending cost, so merged groups are runs
// of similar branches. A stage fits if its time (forward, backward, and its
// once-per-iteration flush divided by the micro-batches) and its busiest link
// are at most T, and its memory with its in-flight count fits the limit. The
// DP's depth is an upper bound of the real stage DAG's, so it never
// underestimates memory. It is checked in oracle_test.go against an
// enumeration of the same search space on random DAGs of up to 8 ops.
//
// The DP's objective, the least bottleneck and then the shallowest pipeline,
// ignores how many micro-batches an iteration has. A pipeline of depth δ over
// M micro-batches takes about M + δ − 1 bottleneck periods, so with few
// micro-batches a shallower pipeline at a slightly longer bottleneck can be
// faster. At the two micro-batch sizes with the fastest plans, the search
// samples the DP's frontier past its optimum T0: it probes six bottlenecks
// growing geometrically up to T0·(1 + 1.5·(δ0 − 1)/M), past which no
// shallower pipeline can pay; where the root can be shallower than the last
// plan offered, a binary search over the candidates (the DP's value never
// grows with T) finds the least T of that depth, and that plan is offered;
// three plans and 12 solves of the DP per size at most. The simulator judges.
// spp's chains get the same treatment.
//
// The DP uses every device it can, but past some count more devices only add
// all-reduce and thin each one's share of the batch: Search also searches on
// half the devices, and half again, while the best plan so far is slower than
// the ideal of that many (every op at the device's best efficiency, never
// idle), and keeps a plan on fewer devices, the rest idle, when it is faster
// (its notes say so).
//
// gpp also runs spp and keeps whichever plan simulates faster, so it is never
// worse than spp.
//
// Activation recomputation (Options.Recompute, recompute.go): every
// candidate stage has a second variant that keeps only the tensors it reads
// from outside for each micro-batch in flight and reruns its forward at the
// start of each backward (priced below). With "auto" (the default) gpp's DP
// and spp's, at each micro-batch size, first solve keeping every activation
// as before; then, only if some stage could hold more micro-batches in
// flight recomputing while still meeting that bottleneck (or nothing fit),
// they solve again with each stage free to do either (a stage fits if
// either variant does; a solution's stage recomputes only where keeping
// does not fit at its depth), and that plan is offered first when it
// reaches a shorter bottleneck or more devices and simulates faster. Where
// memory does not bind the plans stay what they were, byte for byte. When no
// plan fits at the usual sizes, smaller ones are searched on until one
// recomputes nothing, and the fastest is kept (a plan that fits only by
// recomputing can be slower than keeping at a smaller micro-batch). "all"
// makes every stage recompute (spp-exact too); schedules that split the
// backward (zb) never recompute. Checked against brute force in
// recompute_test.go (each stage of every plan of the DP's space keeping or
// recomputing). BENCHMARKS.md's recompute section shows where the planners
// choose it on the paper's models.
//
// Device groups: the DP's tables grow with the square of the device count
// and its splits with the cube; past maxDPDevices (64) devices it counts them
// in groups, each stage on whole groups (dpGroup: the least size that makes at
// most 64 groups, or one up to twice as large that divides the devices
// evenly), and spp-exact does the same. Groups bound the search's time and
// memory past 64 devices, at the price of stages of whole groups only; a
// plan made in groups says so in its notes.
//
// Micro-batch sizes: the powers of two that divide the batch into at most
// MaxMicroBatches (1024) micro-batches, and the batch itself. Only when no
// plan fits at any of them (a batch so large that a 1024th of it overflows
// memory) does Search halve further, while a plan would have at most
// MicroBatchLimit (65536) micro-batches per iteration, and keeps the largest
// size that fits, with a note. The limit bounds a plan's size: every stage's
// action list holds each micro-batch. Byte counts saturate at the largest
// int64, so a batch whose bytes overflow fits nowhere (rather than wrapping
// negative and fitting anywhere).
//
// spp is the best sequential pipeline in the style of PipeDream's planner: the
// same DP on a chain of units, contiguous runs of the graph's topological
// order (at most 128, merged by cost), each stage on k devices (data
// parallel), the same cost model and memory rule. A sequential stage's links
// carry every tensor live across its cuts, including tensors it only relays.
// Its schedule is the chain's: stage i feeds stage i+1.
//
// spp-exact is the best sequential pipeline over every order of the ops that
// the graph allows (Piper-like): a DP over the downsets of the op graph, each
// stage the difference of two downsets. It stops with a LimitError past 4096
// downsets (Options.MaxDownsets), whose number grows exponentially with the
// parallel branches. It too offers spp's plans to the simulator.
//
// # The cost model
//
// Every number below is an assumption unless a source is named.
//
//   - Precision: fp32 training (the CPU backend's), 4 bytes per element.
//   - An op call on a per-device micro-batch m does FLOPs·m of work and moves
//     its activations·m plus its parameters (an embedding moves only the rows
//     it gathers). Its time is Launch + max(work / (peak · eff(work)),
//     bytes / memory bandwidth), with eff(w) = MaxEff · w / (w + HalfWork): a
//     small call underuses the device, which is what makes larger
//     micro-batches pay. Forward, input gradient and weight gradient are
//     separate calls (the backward split of package dag's costs).
//   - MaxEff = 0.81: H100 reached 798 of its 989 dense bf16 TFLOP/s on an
//     8192³ matmul (../shared/background.md); we assume the same fraction of
//     fp32 peak on every GPU. HalfWork (the FLOPs at which a call reaches
//     half of MaxEff) is 2e8 on v100, 3e8 on a100, 1e9 on h100: assumed in
//     proportion to peak, about a 460³ GEMM on a v100. Launch: 10, 8, 6 µs.
//     `graphpipe profile --device cuda` measures them on a GPU: it fits
//     t(w) = a + b·w to a GEMM sweep (profile.FitCompute; the model's time is linear
//     in w) and writes a profile with MaxEff 1, PeakFLOPs 1/b and HalfWork
//     (a − launch)/b with the bare kernel launch, then Launch the fixed
//     cost of an op call through the stage executor (a chain of 1-wide
//     layers trained forward and backward, far dearer than a bare 1×1×1
//     GEMM), and the copy bandwidth. The built-in profiles stay as they
//     were: close enough to the one GPU measured (an H100;
//     bench/gpu/h100-profile.json). What the GEMM sweep does not see:
//     attention's many small per-head products, elementwise kernels, and
//     the host's share of a step (labelling synthetic data, the optimizer),
//     which made a paper-size training step take several times its
//     prediction.
//   - Measured op times (Options.OpTimes, graphpipe profile --model, then
//     search --op-times): each op's forward, input-gradient and
//     weight-gradient time per call, timed through the stage executor on
//     the model itself at every power-of-two micro-batch, replace the FLOP
//     and byte pricing above (linear between the sizes timed, in proportion
//     to the micro-batch beyond the largest); links, all-reduce, the
//     optimizer step and memory still come from the device profile. This is
//     how the paper's planner prices ops. What it fixes: FLOP pricing
//     misses what a model's ops cost (attention runs as per-(sample, head)
//     GEMMs of a few kFLOPs each; layer norm and GELU cost far more than
//     their FLOP count's price), while op times taken in context
//     (stage.TimeOps: the whole model's passes, each op's mean share)
//     predict a one-process run closely. On a GPU (--device cuda) the
//     device is synchronised after every op; that path has run on the CPU
//     emulator of the kernels only. CPU times are taken with the machine to
//     itself: where workers and the NATS server relaying their messages
//     share too few cores, pipelined runs take longer than predicted, the
//     rest being the wait for messages.
//   - Peaks and bandwidths are datasheet values from ../shared/background.md:
//     v100 15.7 TFLOP/s fp32, 900 GB/s, 16 GB; a100 19.5 TFLOP/s, 2.0 TB/s,
//     80 GB; h100 67 TFLOP/s, 3.0 TB/s (measured in a copy), 80 GB.
//   - Links: inside a node 50 (v100, NVLink2), 300 (a100) and 450 (h100) GB/s
//     per direction; between nodes 12.5 GB/s (100 Gb/s InfiniBand, as on
//     Summit), 25 and 50 GB/s; latency 6–20 µs per message. A transfer costs
//     latency + bytes / bandwidth. Each stage edge is its own link in the
//     simulator; inside the DP, where placement is unknown, a link is priced
//     as between nodes whenever the run spans nodes, and a graph stage's link
//     by its largest single crossing tensor.
//   - The cpu profile is this machine (2 cores) as first measured with
//     gonum's pure-Go sgemm: 16 GFLOP/s (12–18 measured), 10.7 GB/s memcpy;
//     0.8 GB/s between workers, NATS publish→subscribe through an embedded
//     server measured at 0.5–1.1 GB/s (../shared/background.md). Package
//     tensor's own sgemm is faster; `graphpipe profile --device cpu`
//     measures it, and probes the links between workers on this host
//     (endpoints over an embedded NATS server, 1 KiB to 8 MiB). The built-in
//     profile keeps the first figures because the runtime's tests choose
//     their plans with it (multi-stage pipelines on small models); for
//     predictions of real CPU runs, use a measured profile: graphpipe
//     profile --device cpu -o cpu.json, then --device cpu.json.
//   - Memory per device: weights, gradients and optimizer state, 4 + 4 + 8
//     bytes per parameter (Adam's two moments; Options.OptimizerBytes: 4 for
//     SGD with momentum, none without),
//     replicated on every data-parallel device; plus the stash of every
//     micro-batch in flight; plus twice the largest output (its value and
//     gradient) as working memory.
//   - A recomputing stage stashes per micro-batch in flight only the tensors
//     it reads from outside (dropout's masks are redrawn from (seed, step,
//     op, sample) and batch_norm's statistics recomputed from the same
//     input, so nothing else need be kept); one micro-batch's full stash is
//     live during its backward, on top of the working memory; its backward
//     takes one forward more. With m micro-batches in flight it saves
//     (m−1)·stash − m·inputs: nothing at one in flight.
//   - In flight: the DP's memory rule counts what 1F1B holds at least, min(M,
//     1 + the longest stage path to a sink); GPipe holds all M. The schedule
//     built for a priced plan warms up further where transfers would stall it
//     and memory has room (microbatch.Warmup): holding no more than that, a
//     stage waits on every micro-batch's round trip. Then each planner's
//     plans within 10% of its fastest (at most 8)
//     have their warm-up tuned by the simulator (tune: raise a stage's count
//     while the iteration gets shorter and memory fits): Warmup's rule is for
//     the steady state, and a few micro-batches through unequal stages can
//     gain from running further ahead. Schedule "zb"
//     (microbatch.ZeroBubble) prices the backward as two calls, B (input
//     gradient, PlanStage.BackwardS) and W (weight gradient, WeightS), and
//     holds what 1F1B holds.
//   - A stage's flush, once per iteration after its last backward: a ring
//     all-reduce of its gradients over its k devices, 2(k−1)/k · bytes /
//     bandwidth + 2(k−1) latencies (between nodes if the stage spans nodes),
//     and the optimizer step, which reads and writes weights, gradients and
//     state once at memory bandwidth.
//   - Communication overlaps compute: a Send never blocks its stage.
//   - Placement: a plan's stages get devices two ways, numbered in order
//     (which keeps a chain's neighbours together) and node-aligned (stages
//     of whole nodes first, then stages smaller than a node best-fit into
//     one node each, as the DP priced them); the simulator keeps the faster.
//     Numbering in order can put a small stage on two nodes, its
//     all-reduce on InfiniBand where the DP priced NVLink.
package search
