// Package stage is the step room: it trains a pipeline stage. The Executor
// runs one stage's ops (the kernel room's kernels, stage/internal/kernel)
// for a micro-batch at a time on a Backend that owns where the state lives,
// and ends each step; the optimizers, learning-rate schedules and clipping;
// the synthetic data, prefetching and evaluation; the one-process Trainer;
// op timing. docs/step.md gives the design at length.
//
// The contract:
//
//  1. A stage's state is its parameters, their gradients, its buffers and
//     the optimizer's state, named by parameter name (dag.Param.Key). The
//     Backend keeps it: on the CPU in the Executor's Params, Grads and
//     Buffers; on CUDA on the device from the first step to the last,
//     crossing to the host only through HostState and OptimizerState (a
//     checkpoint, a stop, a dump, an export, the end) and back through
//     LoadState and LoadOptimizerState. Callers never touch it in a step.
//  2. A micro-batch runs Forward, then Backward (the gradients of what was
//     fed), then, now or deferred by the schedule, Weights; its values stay
//     where the backend keeps them until its last pass, and only what
//     crosses the stage's boundary comes to the host, or stays on the
//     device lent to the caller (KeepOnDevice, DeviceBuffer, Return, Adopt).
//  3. A step: the micro-batches' passes, then EndStep (the gradients
//     all-reduced over the stage's replicas through StepComm, one read of
//     them for the finite check and the clip's squared norms, the global
//     norm pooled) and ApplyStep (the update, or on a skip the buffers
//     restored and the optimizer left alone; the gradients cleared). One
//     process (Trainer) and a pipeline's worker run the same pieces in the
//     same order, so their parameters are equal.
//  4. Where the state lives beyond the backend is the plan's word: a
//     sharded stage's replica (ShardOptimizer, shard.go) keeps, checks,
//     clips and steps its shard of the parameters (Shard.Span of them laid
//     end to end) between its StepComm's ShardComm halves (reduce-scatter,
//     all-gather); a CUDA stage whose state is offloaded (OffloadOptimizer,
//     offload.go) steps on the host, the gradients coming down and the
//     weights going up once a step. OptimizerState is then the shard's,
//     or the host's; GatherOptimizerState puts shards together by name.
//  5. Recompute keeps only a micro-batch's feeds between its forward and
//     its backward, which reruns the forward first: the same computation
//     bit for bit.
//  6. SetPrecision: fp32 everywhere; tf32 (the products' operands read as
//     TF32: PyTorch's allow_tf32) and bf16 (autocast: every value of a
//     micro-batch stored in bf16 by its producer, products on bf16
//     operands, float32 accumulation and reductions) on CUDA only; the
//     parameters, gradients and optimizer state stay float32.
//  7. The synthetic data (Dataset) is a function of (seed, step, input,
//     index) alone; a loss's target is labelled by a fixed random-feature
//     teacher, so the task is learnable.
//  8. The optimizers (SGD, Adam, AdamW), the schedules and clipping by the
//     global norm follow torch.optim, LambdaLR and clip_grad_norm_ step for
//     step; a global norm is summed in float64 in parameter-name order from
//     per-parameter sums that do not depend on the cores, so every
//     partition computes the same number.
//  9. The collector is paced per step (PaceGC): a heap of GBs of state
//     holds its state and two steps' allocations, not twice its state; a
//     GOGC the user sets stands.
//  9. Selective backprop (TrainOptions.Selective, selective.go): the
//     loss's stage scores each sample by its loss (SampleLosses), a
//     Selector keeps samples by percentile(loss)^β from (seed, step,
//     sample) and a history of recent losses, Compact cuts a micro-batch
//     to its kept rows before its backward, and Selected makes EndStep
//     scale the gradients to the mean over the batch's kept samples.
//  10. Two versions of the weights (SetTwoVersions, twobw.go: PipeDream-2BW's
//     W(t+1) = W(t) − lr·∇f(W(t−1))): the passes of the step being
//     accumulated read the version before the newest, those of the next
//     step (run ahead of the update by a pipeline without a flush) the
//     newest; ApplyStep keeps the newest as the stale version before
//     stepping it; the stale version travels in the optimizer's state
//     ("<param>.stale"). On the CPU backend, without buffers or selective
//     backprop.
package stage
