// Package search owns the cost model and the planners; the plans it makes
// are package plan's.
//
// # Contract
//
//  1. Search(g, Options) returns the fastest plan it finds, predicted by the
//     simulator (package microbatch) running the plan's own action lists, or
//     a NoPlanError saying which limit failed, an OptionError naming the flag
//     at fault, or a LimitError when spp-exact stops at its size limit.
//     Before any search it checks the bounds that need no plan (an op's
//     state and fewest activations against a device's memory, the model's
//     state against all of them: refuse.go) and refuses at once, with a
//     NoPlanError that has Bound set and names the op. A
//     gpp plan's SearchReport.Sequential sums up the best sequential plan
//     the search found, exactly what strategy spp returns, so that every
//     search says what the graph pipeline gains.
//  2. The search is deterministic: the same graph and options give the same
//     plan. Micro-batch sizes are searched in parallel and combined in order.
//  3. On devices of several kinds (Options.Cluster) every stage runs on
//     devices of one kind, priced on that kind; the plan is the fastest of
//     the DP over every device and the searches on each kind alone.
//  4. The plan it returns is a plan.Plan (graphpipe/plan@1): package plan
//     owns the plan file, its checks at load, the device profile file and
//     the op-times file, the contract search shares with the runtime.
//     search keeps the cost model's arithmetic over a profile and op times.
//  5. Each stage edge is priced on the transport the run will use (links.go:
//     workers of one node on GPUs copy device to device through an IPC
//     handle, all others send over NATS), from the profile's measured
//     links where it has them, and the plan records the transport; where
//     the profile measured what a run pays beside its ops (plan.RunCosts),
//     every op is slowed by its node's workers sharing the host's cores, a
//     stage's period and the simulator charge each message to both ends,
//     and the prediction includes an iteration's fixed cost. A profile
//     without them (the built-in ones) prices as before.
//
// How the planners search and what the cost model prices, with the figures
// it assumes, is the design note docs/planner.md.
package search
