package stage

import "github.com/graphpipe/graphpipe/stage/internal/kernel"

// Precision (Executor.SetPrecision) is what the stage computes in on the
// device:
//
//   - "fp32" (the default): FP32 operands, FP32 math (cuBLAS SGEMM; cuDNN
//     in CUDNN_FMA_MATH, no TF32);
//   - "tf32": FP32 storage; the matrix products' FP32 operands read as TF32
//     (FP32's range, 10 mantissa bits) by the tensor cores, FP32
//     accumulation (cuda.Device.GemmTF32; cuDNN in its default math, which
//     allows TF32), as PyTorch computes with allow_tf32;
//   - "bf16": PyTorch's autocast, with no rounding kernel of its own: every
//     value of a micro-batch (a model input, an op's output, its gradient,
//     what a backward keeps of it, what crosses the stage's edges) is
//     stored in bf16 by the kernel that makes it (kernel.Residency: half
//     buffers), every matrix product reads bf16 operands and accumulates in
//     FP32 (a weight's bf16 copy, which the optimizer's kernel writes as it
//     writes the weight), normalisations, softmax, losses and every
//     reduction compute in FP32, attention runs fused (its scores never
//     stored), and convolutions take the im2col path (cuDNN's FP32 paths
//     aside). A stage's values on the host are float32 whatever the
//     precision: a bf16 value widened exactly.
//
// The parameters, their gradients and the optimizer state stay float32 in
// every precision (the master weights). The CPU backend computes in float32
// only: it takes "fp32" alone.

// SetAttention says how attention runs on the device: fused (kernels.cu's
// gp_attn_fwd and its backward: the s × s scores never stored, made in
// registers on the CUDA cores and again in the backward) or unfused (the
// default: its products as GEMMs, the scores stored for the backward).
// The CPU backend computes attention unfused alone.
func (e *Executor) SetAttention(fused bool) error { return e.be.attention(fused) }

// Precisions are the precisions SetPrecision knows.
var Precisions = []string{"fp32", "tf32", "bf16"}

// SetPrecision sets what the stage's matrix products compute in: "fp32"
// (the default), "tf32" or "bf16", the last two on the CUDA backend only.
func (e *Executor) SetPrecision(p string) error {
	prec, err := kernel.ParsePrecision(p)
	if err != nil {
		return err
	}
	return e.be.precision(prec)
}
