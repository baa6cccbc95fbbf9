// Package plan is the contract between the planner (package search) and the
// runtime (package runtime): the files one writes and the other reads. It
// holds no planning and no measuring; search produces a Plan, runtime,
// sim and explain consume one, and neither needs the other.
//
// # Contract
//
//  1. A plan file is JSON, versioned by its format tag, graphpipe/plan@1
//     (PlanFormat); the field names and the format string are fixed, and
//     Encode writes a Plan byte for byte the same for the same plan.
//  2. A Plan is self-contained: the model's name, op count and the SHA-256
//     of its canonical rendering (dag.ModelHash), the device profile it was
//     priced with, the devices and their nodes, the memory limit, the batch
//     and its micro-batches, the stages with their ops, devices, per-device
//     micro-batch and predicted times and memory, the stage edges with the
//     tensors that cross them, the transport each takes (TransportIPC or
//     TransportNATS) and what a message costs either end, an iteration's
//     fixed cost, every stage's action list, the predictions, and how the
//     search found it. Plans written before edges recorded a transport
//     decode with none, and simulate as they always did. Running it needs nothing else but the
//     model.
//  3. DecodePlan reads a plan strictly (unknown fields, trailing data, an
//     empty file, a model file or another format are refused, each with a
//     one-line error) and checks that it is whole: at least one stage,
//     1..MaxDevices devices and no device in two stages, batch, micro-batch
//     and micro-batch count that agree (at most MicroBatchLimit), a known
//     schedule, every stored time and size finite and not negative, each
//     stage's micro-batch per device following from its replicas, no op in
//     two stages, edges between two stages once each, stages that hold the
//     model's op count, and action lists that form a valid schedule
//     (microbatch.Check). LoadPlan, given the model, also checks that the
//     plan was made for it (by hash), that every op is in exactly one stage,
//     that the stages are convex with acyclic dependencies, and that the
//     edges bring every stage each tensor its ops read from another stage.
//     Each refusal is a PlanError naming the stage and the field. The hash
//     check is CheckModelHash, the one every caller that meets a plan and a
//     model uses (LoadPlan, runtime's job, coordinator and local run): a
//     *ModelMismatchError naming the op and both hashes.
//  4. A device profile (graphpipe/device@1, Device) is what the cost model
//     knows of an accelerator and its links; Profiles are the built-in ones.
//     ParseDevice reads a profile file strictly and refuses a missing
//     number or one outside the bounds (bounds.go: rates, seconds, factors)
//     that keep every sum the cost model makes of them finite. What a run pays beside its ops (RunCosts: the
//     NATS path, the same-host device path, the ring all-reduce, a
//     message's cost to either end, an iteration's fixed cost, the
//     slowdown of workers sharing a host's cores), as graphpipe profile
//     measures it, is optional: a profile without it, the built-in ones
//     and every file written before it, prices as it always did. The
//     arithmetic that prices ops and links with a profile is search's.
//     SameDevice says whether two profiles name one device (a pool matches
//     agents to a plan by it).
//  5. A cluster file (graphpipe/cluster@1, DecodeCluster) describes devices
//     of several kinds: groups of nodes, each node's devices of one device
//     profile (a built-in name, a profile file or one inline), and
//     optionally the link between nodes of different kinds; a refusal is a
//     ClusterError naming the group and field. A plan made for such devices
//     carries the cluster (one Kind per profile: devices, devices per node,
//     memory limit) and each stage's kind; devices and nodes are numbered
//     kind by kind, a stage's devices are all of its kind, and each stage
//     keeps within its kind's memory. A plan without them is a plan on
//     devices of one kind, as plans always were.
//  6. An op-times file (graphpipe/optimes@1, OpTimes) holds one model's ops
//     timed on one device at several micro-batch sizes, tied to the model by
//     OpsHash (its canonical rendering without seed and batch size).
//     DecodeOpTimes refuses a file that is not whole, or a time past
//     MaxSeconds, with an OpTimesError naming the field. A plan's stored
//     numbers are bounded by MaxStored, so a simulation's sums are finite.
//
// plan imports dag, partition and microbatch only.
package plan
