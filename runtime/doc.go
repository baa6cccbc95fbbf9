// Package runtime runs plans: stage workers that execute their action lists
// with a stage.Executor and exchange activations and gradients through the
// reliable endpoints of runtime/wire, and the coordinator that assigns their
// stages and drives their iterations. A plan is a plan.Plan, read through
// plan.LoadPlan; runtime does not import the planner (search), nor anything
// that starts processes or writes a run's outputs (runtime/supervise).
//
// A run is one Job, passed down whole: Coordinate(ctx, job, transport,
// progress) on the coordinator's side; Serve(ctx, transport, Join) on a
// worker's, which rebuilds the Job from what the coordinator sends; RunLocal
// for the tests' in-process runs. The Job lives here, not in supervise,
// because coordinator and workers share it: supervise.Job embeds it and adds
// what only a supervisor uses (restarts, output files). A Job holds
//
//   - Run, Graph, Plan, Steps and Options: the run itself. Options is what
//     every worker is sent with its stage, whole (training, emulation, the
//     non-finite policy, the checkpoint interval, where it starts, the data);
//   - Config: what stays in one process. On the coordinator: the stop
//     channel, callbacks, the checkpoint directory, the checkpoint to resume,
//     the generation, the join timeout; on a worker process: its device, its
//     precision, its test hooks (KillPoints), its join timeout (how long it
//     waits for a stage while no coordinator is heard: a JoinError) and
//     whether it streams its checkpoint shards; on both: the connection
//     state streams take (Bulk) and the Timings, of
//     which the coordinator's are sent to its workers with their stages, so
//     one run keeps one heartbeat timeout. No configuration is kept in
//     package variables.
//
// The caller's duties:
//
//  1. Build the Job and check it once with Job.Validate (every refusal a
//     *JobError naming the field, "Options.CheckpointEvery" or
//     "Config.JoinTimeout"); Coordinate checks only that the plan was made
//     for the model (plan.CheckModelHash: a *plan.ModelMismatchError, which
//     Validate's JobError carries too).
//  2. Give Coordinate a transport every worker of the run reaches, and start
//     one worker per device of the plan (Workers) with Serve, each with its
//     own process's Config; a worker of a pool's agent says which slot it was
//     placed on (Join.Slot).
//  3. Close Config.Stop to stop the run between iterations; read the result,
//     or the typed error: StoppedError, NonFiniteError, SilentError (a
//     worker gone quiet), DataError (the user's data refused).
//
// What the runtime does:
//
//  1. A worker runs its action list in order, driving its stage's
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
//     all-reduce (2) and the norm exchange (3) as a stage.StepComm.
//  2. A data-parallel stage's replicas all-reduce their gradients with a
//     ring (allreduce.go): each sends 2(k−1)/k of them, as the cost model
//     prices, and each chunk is summed once, in one order, and copied, so
//     every replica steps its optimizer on the same numbers. A stage whose
//     plan shards its optimizer state (plan.StateSharded, optstate.go)
//     runs the ring's halves apart: the reduce-scatter leaves replica r the
//     sum of chunk r+1, its shard, which it alone checks, clips and steps
//     with its shard of the state; the all-gather then copies every
//     replica's updated chunk to the others. Its replicas each send their
//     shard's squared norms (3), every worker adding them in replica
//     order, and each hands its shard of the state to replica 0 for a
//     checkpoint, written whole and keyed by name (6). A stage whose state
//     lives in host memory (plan.StateHost) steps on the host where its
//     worker computes on a GPU (stage.Executor.OffloadOptimizer). Where the
//     stage's replicas lie on several nodes, as many on each
//     (plan.RingLayout), every ring runs in two levels, within each node
//     and then across them, each replica still ending with its own shard
//     summed (ringlayout.go). The ring may overlap the last weight pass in
//     buckets (overlap.go), and a sharded stage's all-gather may run late,
//     whole or in buckets that the next first forward waits for op by op
//     (plan.PlanStage.GatherS, GatherBucketBytes).
//  3. Clipping by the global norm (clip.go) needs every stage's gradients:
//     after the all-reduce, each stage's replica 0 sends its parameters'
//     squared norms to every other worker, and each worker sums all of them
//     in parameter-name order (stage.GlobalNorm), so every worker clips by
//     the same number, the one a single process computes. The learning rate
//     is a function of the iteration alone (stage.TrainOptions.Rate).
//  4. Each stage's executor reads its gradients once per iteration, after
//     the all-reduce and before clipping, and the stage reports with the
//     iteration whether they or its share of the loss hold a NaN or an
//     infinity (naming the first op only when they do). On one, the
//     coordinator ends the run (NonFiniteError) and
//     writes no checkpoint from that iteration; a checkpoint holding such a
//     value is refused whole. With OnNonFinite skip every stage waits for a
//     verdict before its optimizer step and skips the update, all stages and
//     replicas alike (buffers restored, the optimizer untouched), up to
//     Config.MaxSkips iterations in a row.
//  5. Config.Stop closed stops the run between iterations: every stage's
//     replica 0 hands over its state, written as a checkpoint at that step
//     (StoppedError); a run resumed from it continues bit for bit.
//     Checkpoints are written atomically and keyed by parameter name, so one
//     made under one plan loads under another. A checkpoint is sharded
//     (shard.go, graphpipe/checkpoint@2): each stage's replica 0 writes its
//     own params and optim shards where it sees the checkpoint directory
//     (a probe file the coordinator leaves there tells it), and streams them
//     to the coordinator where it does not; the manifest, naming every
//     shard with its checksum and size and the stages that complete it, is
//     written last; a checkpoint directory's step and its manifest's must
//     agree (StepMismatchError). LoadCheckpoint reads @1's two files too.
//  6. State never travels whole in one message: checkpoint shards, the
//     parameters at the end and a share to resume from are streams of
//     bounded chunks, each sent only once its receiver grants it
//     (stream.go), over bulk endpoints in a generation of their own, on
//     Config.Bulk (a connection of their own) when set: heartbeats and
//     orders never queue behind them. A worker that has handed over all it
//     owed and left is not taken for silent while others' streams run.
//  7. The coordinator and every worker beat every Timings.HeartbeatEvery; a
//     worker leaves when its coordinator has been silent for
//     Timings.HeartbeatTimeout, and the coordinator names a worker silent as
//     long (SilentError), or one that says it has computed one action past
//     its hang timeout. A process that stalled itself does not count its
//     own stall as the other side's silence.
//  8. LockDir gives a checkpoint directory one owner: an exclusive flock the
//     OS drops with its process, the holder named in the lock file.
//  9. Every file a run reads (a checkpoint's manifest and shards, a probe)
//     must be a regular file (internal/regular): a FIFO is refused, never
//     waited on.
//  10. A worker's sends go out in the order its actions queue them, on a
//     goroutine of their own (sender.go), so that its compute runs ahead
//     of them, except a small message in host memory with nothing queued
//     before it, which the worker sends itself (a worker on one core would
//     otherwise hold it until its compute next waits); a micro-batch's
//     backward waits for the micro-batch's sends, and the step for all of
//     them. Frames are made from the tensors' own memory; a message from
//     the one replica across an edge is read where it was assembled, and
//     its buffer reused after the step. On a GPU what a stage sends stays
//     on its device until the worker sends it: downloaded into pinned
//     staging piece by piece while the pieces before go out (devsend.go),
//     or, between workers of one host whose devices reach each other, not
//     at all: the edge's buffers go as IPC handles and the receiver copies
//     them device to device (ipc.go; every worker learns the others' host
//     and device once all have joined).
//     Options.NoIPC and a worker's Config.NoIPC send bytes instead. Each
//     report carries what the worker's ends of its edges took (LinkTime);
//     EdgeTimes sums them by plan edge.
//  11. After its step a worker paces the collector (stage.PaceGC): the
//     heap may grow by several steps' allocations past what lives in it,
//     or by its own size, up to 256 MB; a larger one by two steps'; a GOGC
//     the user sets stands.
package runtime
