// Package kernel is the kernel room: forward and backward of every op kind
// of graphpipe/model@1 and @2, on the CPU (generic over float32 and
// float64) and on a GPU (package tensor/cuda), one row per kind in one
// table (table.go: the CPU kernel, the GPU kernel, how the parameters
// start, how the synthetic data labels a loss; docs/adding-an-op.md), the
// kernels grouped by family, a family's GPU kernels beside its CPU ones
// (dense.go and dense_gpu.go, ...). Package stage, the step room, runs
// them; nothing else imports this one.
//
// The contract:
//
//  1. Values are batch-major: a tensor of per-sample shape S on a batch of
//     n has shape [n, S...]; int32 tensors (indices, labels) carry Ints.
//  2. New and NewGPU make op i's kernel once, when an executor is made;
//     Forward makes the output and what Backward needs (the stash);
//     Backward adds into every gradient it is given (+=) and skips those
//     given as nil, which is how an input-gradient step (B) and a
//     weight-gradient step (W) are separated.
//  3. float32 is what runs (matrix products through tensor.Sgemm); float64
//     is what the tests check against central finite differences. A GPU
//     kernel keeps its CPU kernel's interface and results (within 1e-3
//     relative, on the CPU emulator of the CUDA kernels and on a GPU).
//  4. Parameters start from (seed, op name, slot) as PyTorch's modules
//     start them by default (InitParams), never from a partition. Buffers
//     (batch_norm's running statistics) follow the parameters in a
//     kernel's p, with nil gradients; forward passes move them, in
//     micro-batch order, except in evaluation and in a recomputed pass.
//  5. A pass's kernels read where its micro-batch is (Pass): dropout draws
//     its masks from (seed, step, op, sample), so every plan, micro-batch
//     size, replica split and restart draws the same.
//  6. Losses reduce by the mean over the batch (and over elements for mse
//     and bce_with_logits), as PyTorch's defaults; a micro-batch's seed
//     gradient is b/B, so the micro-batches of an iteration add up to the
//     batch's gradient.
//  7. opaque ops and indices out of their table's range fail with an
//     OpError naming the op: nothing trains on wrong data.
//  8. A GPU kernel runs in a Scope whose Residency says where values live
//     between calls (the step room's device state, or Copies for a kernel
//     used alone) and the precision (fp32, tf32, bf16). In bf16 a kernel
//     stores the activations and activation gradients it writes in bf16
//     (ActScratch: half buffers; kernels.cu's name_h forms), reads its
//     parameters in float32 and a product's weight as its bf16 copy, and
//     computes in float32; attention runs fused (gp_attn_fwd and its
//     backward), never storing its scores.
package kernel
