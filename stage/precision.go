package stage

import (
	"fmt"

	"github.com/graphpipe/graphpipe/tensor/cuda"
)

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
	switch p {
	case "", "fp32":
		return e.be.precision("fp32")
	case "tf32", "bf16":
		return e.be.precision(p)
	}
	return fmt.Errorf("precision %q: unknown (known: fp32, tf32, bf16)", p)
}

// testHookGemm, when set (tests), is called before every matrix product a
// kernel runs on the device, with its arguments, the batch strides and
// count (count 0: one product, not batched) and the precision ("fp32",
// "tf32" or "bf16"); the function it returns is called after.
var testHookGemm func(d *cuda.Device, g cuda.GemmArgs, sa, sb, sc, count int, precision string) func()

// product runs a matrix product (count 0), or count of them at strides sa,
// sb and sc, in the device state's precision.
func (s *gpuScope) product(g cuda.GemmArgs, sa, sb, sc, count int) {
	if s.err != nil {
		return
	}
	bf16, tf32 := s.bf16(), s.tf32()
	if testHookGemm != nil {
		p := "fp32"
		if bf16 {
			p = "bf16"
		} else if tf32 {
			p = "tf32"
		}
		defer testHookGemm(s.d, g, sa, sb, sc, count, p)()
	}
	switch {
	case bf16 && s.resident() != nil: // a parameter operand's bf16 copy is made once a step (devTrain.half)
		s.fail(s.d.GemmRoundedWith(g, cuda.BF16, s.dev.train.half(s, g.A), s.dev.train.half(s, g.B), sa, sb, sc, max(count, 1)))
	case bf16:
		s.fail(s.d.GemmRoundedBatched(g, cuda.BF16, sa, sb, sc, max(count, 1)))
	case tf32 && count == 0:
		s.fail(s.d.GemmTF32(g))
	case tf32:
		s.fail(s.d.GemmTF32Batched(g, sa, sb, sc, count))
	case count == 0:
		s.fail(s.d.Sgemm(g))
	default:
		s.fail(s.d.SgemmBatched(g, sa, sb, sc, count))
	}
}
