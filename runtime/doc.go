// Package runtime runs plans: stage workers that execute their action lists
// with a stage.Executor and exchange activations and gradients over a
// Transport (NATS, or in memory for tests). A plan is a plan.Plan, read
// through plan.LoadPlan; runtime does not import the planner (search).
//
// The contract, and what it answers of the measured facts in the issue:
//
//  1. Frames are versioned and msgpack-encoded, tensor data as one binary
//     field; each names (run, generation, iteration, micro-batch, edge,
//     direction, chunk). DecodeFrame checks every length against the bytes
//     left before allocating, so a small frame that declares a huge array is
//     refused, not obeyed.
//  2. A message larger than the transport's payload limit is cut into chunks
//     and reassembled.
//  3. Core NATS is at-most-once, so each link (a sender, a receiver, an edge,
//     a direction) numbers its frames, acknowledges each one and keeps a
//     window of unacknowledged frames, resending after a timeout. Receivers
//     drop duplicates by (generation, iteration, micro-batch, edge, direction,
//     chunk) and acknowledge them again. Nothing trains on a missing or
//     repeated micro-batch.
//  4. A worker runs its action list in order, driving its stage's
//     microbatch.Cursor as the simulator does, with an executor: one that
//     computes (computer), or, for an emulated run (Options.Emulate), one
//     that sleeps until the cursor's planned times and sends, instead of
//     tensors, when the data lands by the plan (sleeper). Gradients are
//     summed in a fixed order (edge order, micro-batch order), never arrival
//     order, so results do not depend on what the network did. A schedule
//     that splits the backward (zb) runs B as the inputs' gradients only and
//     W, later, as the parameters' (stage.Executor.Backward without weights,
//     then Weights). After its list the worker has the executor end the
//     step (stage.Executor.EndStep, then ApplyStep), lending it the
//     all-reduce (5) and the norm exchange (6) as a stage.StepComm.
//  5. A data-parallel stage's replicas all-reduce their gradients with a
//     ring (allreduce.go): each sends 2(k−1)/k of them, as the cost model
//     prices, and each chunk is summed once, in one order, and copied, so
//     every replica steps its optimizer on the same numbers.
//  6. Clipping by the global norm (clip.go) needs every stage's gradients:
//     after the all-reduce, each stage's replica 0 sends its parameters'
//     squared norms to every other worker, and each worker sums all of them
//     in parameter-name order (stage.GlobalNorm), so every worker clips by
//     the same number, the one a single process computes. The learning rate
//     is a function of the iteration alone (stage.TrainOptions.Rate).
//  7. Each stage's executor reads its gradients once per iteration, after
//     the all-reduce and before clipping, and the stage reports with the
//     iteration whether they or its share of the loss hold a NaN or an
//     infinity (naming the first op only when they do). On one, the coordinator ends the run (NonFiniteError) and
//     writes no checkpoint from that iteration; a checkpoint holding such a
//     value is refused whole. With OnNonFinite skip every stage waits for a
//     verdict before its optimizer step and skips the update, all stages and
//     replicas alike (buffers restored, the optimizer untouched), up to
//     MaxSkips iterations in a row.
//  8. Options.Stop closed stops the run between iterations: every stage's
//     replica 0 hands over its state, written as a checkpoint at that step
//     (StoppedError); a run resumed from it continues bit for bit.
//  9. LockDir gives a checkpoint directory one owner: an exclusive flock the
//     OS drops with its process, the holder named in the lock file.
//  10. A run is one Job: what every worker is sent (model, plan, steps,
//     Options) apart from what stays with the coordinator (Local: restarts,
//     output files), checked whole by Job.Validate (a *JobError names the
//     field). A Supervisor runs its generations through a Launcher (local
//     processes, external workers, pooled agents), each generation with its
//     own plan and slots, restarting from the last checkpoint after a
//     failure, and writes the outputs (trace, timeline, profile, dump) once
//     the run is over.
//  11. Over a NATS cluster (DialNATS with every node's URL) a client whose
//     node dies reconnects to another and restores its subscriptions there;
//     a publish while it reconnects is lost, not an error, and the links (3)
//     resend it; a frame resent after a reconnect is a duplicate like any
//     other. Every subject of a run is under graphpipe.RUN., so a NATS
//     permission on graphpipe.USER.> fences one user's runs (run IDs
//     USER.NAME). The embedded server (StartEmbeddedOn) refuses to listen off
//     loopback with neither a token nor TLS.
//  12. A pool's agents (Agent) advertise themselves (host, device, pid, who
//     holds them) every heartbeat; a PoolLauncher offers slots only to
//     agents heard within the heartbeat timeout, counts an agent only once
//     it confirms, puts each plan node's workers on agents of one host (or
//     refuses: PlacementError), fails the generation when a taken agent
//     falls silent, and releases its agents at the end. An agent held by a
//     coordinator that falls silent goes back to the pool by itself.
//  12. With Supervisor.Elastic and a launcher that counts its devices
//     (Capacity: a pool), a restart whose spare does not come within
//     ReplaceWait runs a plan for the devices left (Elastic.Replan, the
//     caller's planner: runtime plans nothing), resumed from the last
//     checkpoint; a generation on fewer devices than the first plan stops at
//     its next checkpoint once more are there, and grows back. Every
//     recovery is timed per phase (Recovery, in Result.Recoveries) from the
//     lost worker's last sign of life (SilentError) to training again.
package runtime
