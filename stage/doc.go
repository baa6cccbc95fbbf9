// Package stage computes a pipeline stage: forward and backward of every op
// kind of graphpipe/model@1 and @2 on a backend (the CPU, or the CUDA
// backend of package tensor/cuda), parameter initialisation, the activation
// stash per micro-batch, gradient accumulation, the optimizers, and the
// Executor that runs one stage's ops for one micro-batch and ends each
// step: the finite check, clipping and the optimizer's update.
//
// Each op kind is one row of the kernel table (kinds.go): its CPU kernel,
// its GPU kernel, how its parameters start and, for a loss, how the
// synthetic data labels its target (docs/adding-an-op.md).
//
// The contract:
//
//  1. Parameters are initialised from (seed, op name, slot) the way
//     PyTorch's modules initialise them by default (init.go), so a partition
//     never changes them. A parameter's or buffer's name is its dag.Param.Key
//     ("<op name>.<slot>" unless the model names it). Buffers (batch_norm's
//     running statistics) are updated by forward passes, in micro-batch
//     order, and never by an optimizer; a kernel reads them after the
//     parameters in its p, with nil gradients.
//     1a. Forward is told where its micro-batch's samples are (Position: the
//     step and the index of its first row in the step's batch); dropout
//     draws its masks from (seed, step, op, sample), so every plan draws the
//     same.
//  2. Values are batch-major: a tensor of per-sample shape S on a batch of n
//     has shape [n, S...]. int32 tensors (indices, labels) carry Ints.
//  3. Kernels are generic over float32 and float64: production runs float32
//     (matrix products through tensor.Sgemm); the tests run float64 against
//     central finite differences. Backward accumulates into the gradients it
//     is given (+=) and skips those given as nil, which is how an input-
//     gradient step (B) and a weight-gradient step (W) are separated.
//  4. Losses reduce by the mean over the batch (and over elements for mse and
//     bce_with_logits), as PyTorch's defaults. A micro-batch's loss gradient
//     is seeded with b/B, so accumulating the micro-batches of an iteration
//     gives the full batch's gradient.
//  5. opaque ops cannot be computed: anything that must compute one fails
//     with an error naming it. Indices out of their table's range fail too:
//     nothing trains on wrong data.
//  6. Every value lives where the executor's Backend keeps it: CPU() or
//     CUDA(d), chosen when the executor is made (NewExecutor; UseDevice
//     moves one made on the CPU). The backend owns the parameters, their
//     gradients, the buffers, the optimizer's state and the values in
//     flight, and runs the step's pieces on them (backend.go). On the CPU,
//     Params, Grads and Buffers are the state. On CUDA (backend_cuda.go)
//     the GPU kernels (gpu.go) keep the CPU kernels' interface and results
//     (within 1e-3 relative, checked on the CPU emulator of the CUDA
//     kernels and on a GPU where there is one), and the state lives on the
//     device from the first step to the last (gpu_state.go): parameters,
//     gradients, optimizer state and buffers in flat buffers in
//     parameter-name order, uploaded once (from the seed's values, --init
//     or a checkpoint: LoadState) and brought to the host by HostState
//     and OptimizerState alone; the finite check, the norms, the clip, the
//     optimizer (the host's arithmetic, bit for bit) and the clear run
//     there, and a step's losses and squared norms come down in one copy.
//     Values in flight stay on the device while a micro-batch is; only
//     what crosses the stage's boundary is copied, through pinned staging,
//     one wait a pass (gpu_exec.go), but what the caller takes from the
//     device itself (gpu_link.go): a training Forward leaves the outputs
//     it names (KeepOnDevice) on the device, and Backward the gradients of
//     the fed values it names, each lent to the caller (DeviceBuffer)
//     until Return, which the micro-batch's release does not free; Adopt
//     makes a device buffer a micro-batch's fed value or given gradient. Callers never touch the state in a
//     step: they read it between steps with HostState (a checkpoint, a
//     dump, an export; State alone is the host's copies, which a device
//     may have left behind) and OptimizerState, and write it with
//     LoadState and LoadOptimizerState.
//     6a. A step (step.go): the caller runs the micro-batches' Forward,
//     Backward and Weights (a pipeline's worker interleaves them with its
//     transfers); the first training Forward keeps the buffers; each keeps
//     its loss on the backend. Then EndStep all-reduces the gradients over
//     the stage's replicas (StepComm; not handed them when it says it has
//     none, Replicated), reads them once for the finite check and, with
//     clipping, the squared norms, checks them and the step's loss for
//     values that are not finite, pools the global norm (StepComm) and
//     clips, and returns the StepReport (the stage's loss share, the norm,
//     where a value is not finite); ApplyStep(skip) updates (or, skipping,
//     restores the buffers and leaves the optimizer alone) and clears the
//     gradients. One process (Trainer, no StepComm) and a pipeline run the
//     same pieces in the same order. On the CPU the pieces after the check
//     are one pass over the parameters (backend_cpu.go's fused): the clip's
//     scale, the optimizer's update and the gradients' clear, element by
//     element in the arithmetic of the passes one after another; every
//     pass over the state is split across the cores in pieces (eachPiece).
//  7. Executor.Recompute (recompute.go) keeps only a micro-batch's feeds
//     between its forward and its backward, which reruns the forward
//     first (batch_norm then leaves its running statistics alone): the
//     same computation bit for bit, one micro-batch's activations live
//     instead of one per micro-batch in flight.
//  8. Executor.SetPrecision (precision.go), on the CUDA backend only: "bf16"
//     rounds every matrix product's operands to bfloat16 and accumulates in
//     float32 (PyTorch's autocast); "tf32" runs them on TF32 tensor cores
//     (operands rounded to a 10-bit mantissa, float32 accumulation:
//     PyTorch's allow_tf32). Everything else, the parameters, gradients and
//     optimizer state stay float32.
//  9. The synthetic data (Dataset, data.go): each value is a function of
//     (seed, step, input name, index) alone, so every process makes the same
//     batch and a stage makes only the inputs it reads; the stage that reads
//     the loss's target labels it with a fixed random-feature teacher that
//     reads at most 64 positions of each other input, far cheaper than the
//     model.
//  10. The optimizers (the catalogue in optimizers.go: SGD, Adam, AdamW),
//     the learning-rate schedules (schedule.go) and clipping by the global
//     norm (clip.go) follow torch.optim, LambdaLR and clip_grad_norm_ step
//     for step. A step's rate is a function of the step alone; a global
//     norm is summed in float64 in the order of the parameters' names from
//     per-parameter squared norms whose own sums do not depend on the
//     cores, so every partition of the model computes the same number.
//  11. The collector is paced per step (PaceGC, gcpace.go; Trainer.Apply
//     and every runtime worker call it): a heap may grow past what lives in
//     it by 8 steps' allocations or its own size, each up to 256 MB, and
//     by 2 steps' allocations where that is more, so that a model with GBs
//     of state holds its state and two steps' allocations, not twice its
//     state. A GOGC the user sets stands.
package stage
