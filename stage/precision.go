package stage

import "github.com/graphpipe/graphpipe/stage/internal/kernel"

// Precision (Executor.SetPrecision) is what the stage's matrix products on
// the device (linear, matmul, attention's per-head products, convolutions'
// GEMMs or cuDNN's convolutions, forward and backward) compute in:
//
//   - "fp32" (the default): FP32 operands, FP32 math (cuBLAS SGEMM; cuDNN
//     in CUDNN_FMA_MATH, no TF32);
//   - "tf32": FP32 operands read as TF32 (FP32's range, 10 mantissa bits)
//     by the tensor cores, FP32 accumulation (cuda.Device.GemmTF32; cuDNN
//     in its default math, which allows TF32), as PyTorch computes with
//     torch.backends.cuda.matmul.allow_tf32 and cudnn.allow_tf32;
//   - "bf16": both operands rounded to bfloat16, FP32 accumulation into an
//     FP32 result (cuda.Device.GemmRounded), as PyTorch's autocast runs
//     matmuls on bf16. A weight is rounded once a step, after the update,
//     into a bf16 copy every product of the step reads (as autocast's
//     weight cache), the activations and gradients at each product.
//     Convolutions keep the im2col path in bf16 (its GEMMs rounded so),
//     not cuDNN's.
//
// Every other kernel (elementwise ops, normalisations, softmax, losses,
// reductions) runs in float32 in every precision, and the parameters, their
// gradients and the optimizer state stay float32 (the master weights). The
// CPU backend computes in float32 only: it takes "fp32" alone.

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
