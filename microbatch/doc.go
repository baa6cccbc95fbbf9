// Package microbatch owns pipeline schedules: per-stage action lists for a
// DAG of stages, their checks, and the discrete-event simulator.
//
// A Pipeline is the shape a schedule is made for: stages, the stage edges
// (from, to) and the number of micro-batches. A Schedule gives every stage an
// ordered list of actions: F (forward), B (backward; the input gradient only
// when the schedule splits backward, the whole backward otherwise), W (weight
// gradient, when split), and the Send and Recv of activations (forward, along
// an edge) and gradients (backward, against it). A stage runs its list in
// order: a Recv waits for the matching Send's data; a Send never waits.
//
// Schedules:
//
//   - GPipe: every forward, then every backward.
//   - 1F1B generalised to a stage DAG: stage s first runs n_s forwards, where
//     n_s = min(M, 1 + the longest path in stages from s to a sink), then
//     alternates one backward and one forward, then drains. On a chain this is
//     PipeDream-Flush's 1F1B; on a DAG parallel branches are not serialised.
//     NewTimed, given the durations and a memory limit, warms stages up
//     further (Warmup): by as many micro-batches as the round trip of the
//     transfers downstream of a stage needs so that no stage stalls in the
//     steady state, within the memory limit, every stage still behind each
//     stage before it. "1f1b-depth" keeps the depth rule however it is built.
//   - Zero bubble ("zb", ZeroBubble, built by NewTimed only): 1F1B's order of
//     F and B with the backward split, B the input gradient and W the weight
//     gradient; each W waits in a queue and runs when its stage would
//     otherwise wait for data, or before a forward that would hold more
//     micro-batches than 1F1B's warm-up (a micro-batch's stash is freed by
//     its W). The lists are made by playing the schedule forward with the
//     durations. Zero Bubble (Qi et al., ICLR 2024) is for chains; this one
//     runs on any stage DAG.
//   - PipeDream-2BW ("2bw", TwoBW, twobw.go): 1F1B with no flush between
//     iterations. Its lists (NoFlush) are one steady iteration, cut after
//     each stage's last backward of the batch, where the stage updates; the
//     w−1 forwards it runs ahead are the next batch's (indices from M on),
//     read the newest weights, while the batch's own micro-batches read the
//     version before: two versions, weights one update stale everywhere,
//     which needs w−1 ≤ M on every stage (StalenessError otherwise).
//     IterationLists gives the first iteration of a run (its warm-up) and
//     the last (its drain); the simulator plays several iterations back to
//     back and reports the steady state's period.
//
// A ScheduleKind (KindOf, from the name a flag or a plan file gives)
// describes a schedule by what its builders and the planner branch on:
// whether the backward splits, whether every forward runs first, whether
// its warm-up counts come from the durations and may be tuned. Code outside
// this package reads those properties, never the name.
//
// Check verifies a schedule: every micro-batch's F, B (and W) once per stage in
// that order, sends and receives that pair up in the same order on every edge,
// and no deadlock. Simulate runs a schedule against per-stage and per-edge
// durations (and, where a profile measured them, what a message costs the
// stage sending it and the stage taking it, and a fixed cost per iteration:
// Timing.Post, Take and Fixed) and returns the iteration time, busy and idle time per stage, the
// bubble fraction and peak memory, and every event (each transfer at both
// ends: a Send on the sender's stage, a Recv on the receiver's), which render
// as a step × stage grid and as Chrome trace JSON (Trace), which ParseTrace
// reads back; Timeline makes a Result of measured events; package chart draws
// them as timelines.
//
// Every interpreter of a schedule drives the same Cursor (cursor.go; its
// doc states the caller's duties), one per stage: Simulate against a
// mailbox of arrivals, ZeroBubble while choosing what to append to each
// list, and package runtime's workers over the network, computing or
// sleeping the plan's times. A transfer's time on its link, one transfer
// at a time per edge and direction, is Link.Carry's alone.
//
// The package is deterministic and does no I/O.
package microbatch
