// Package sweep schedules many training jobs on one cluster (Saturn's
// SPASE problem: select each job's parallelism, allocate its devices,
// schedule its start), and carries such a schedule out as jobs end. It is
// part of the planning core: deterministic, no I/O, time as a number.
//
// The contract:
//
//  1. A Problem is jobs on identical devices, PerNode to a node: each job
//     has Choices (a device count and the seconds it takes there, which the
//     caller prices with the planner: steps × its iteration time) and the
//     jobs it waits for (After). Validate refuses one that has no schedule
//     with a ProblemError naming the job and field.
//  2. A Schedule gives every job a Slot: one of its choices, a block of
//     consecutive devices (within one node, or from a node's first device:
//     the plan's nodes are the cluster's) and a start; no two jobs hold a
//     device at once, so the jobs never hold more than the devices; a job
//     starts after those it waits for. Check says what a schedule breaks.
//  3. Solve is the heuristic (critical path and area allotment, list
//     scheduling with backfilling, a local search over choices); Exact is
//     the oracle it is tested against, by enumeration, on small problems;
//     LowerBound is what no schedule beats, for problems Exact cannot
//     finish. OneAtATime (each job alone on its fastest choice, in turn)
//     and EqualSplit (the devices cut evenly among the jobs) are the
//     practices a sweep is compared with; Solve never ends after them.
//  4. Progress carries a schedule out: which jobs may start now, their
//     starts and ends as they happen, failures (whose waiting jobs are
//     skipped), and re-planning of the jobs not started when a measured
//     time drifts from its prediction.
//
// sweep imports no other room: the caller prices the choices (search) and
// runs the jobs (runtime/supervise).
package sweep
