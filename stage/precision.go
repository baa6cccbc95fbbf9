package stage

import (
	"fmt"

	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// Mixed precision (Executor.SetPrecision): with "bf16" every matrix product
// of the stage's kernels on the device (linear, matmul, attention's
// per-head products, convolutions' GEMMs, forward and backward) rounds its
// two operands to bfloat16 and accumulates in float32 into a float32
// result (cuda.Device.GemmRounded), the way PyTorch's autocast runs
// matmuls on bf16; every other kernel (elementwise ops, normalisations,
// softmax, losses, reductions) runs in float32, and the parameters, their
// gradients and the optimizer state stay float32 (the master weights).
// The CPU backend computes in float32 only.

// Precisions are the precisions SetPrecision knows.
var Precisions = []string{"fp32", "bf16"}

// SetPrecision sets what the stage's matrix products compute in: "fp32"
// (the default) or "bf16", which needs the CUDA backend.
func (e *Executor) SetPrecision(p string) error {
	switch p {
	case "", "fp32":
		return e.be.bf16(false)
	case "bf16":
		return e.be.bf16(true)
	}
	return fmt.Errorf("precision %q: unknown (known: fp32, bf16)", p)
}

// testHookGemm, when set (tests), is called before every matrix product a
// kernel runs on the device, with its arguments, the batch strides and
// count (count 0: one product, not batched) and the precision; the
// function it returns is called after.
var testHookGemm func(d *cuda.Device, g cuda.GemmArgs, sa, sb, sc, count int, bf16 bool) func()

// product runs a matrix product (count 0), or count of them at strides sa,
// sb and sc, in the device state's precision.
func (s *gpuScope) product(g cuda.GemmArgs, sa, sb, sc, count int) {
	if s.err != nil {
		return
	}
	bf16 := s.dev != nil && s.dev.bf16
	if testHookGemm != nil {
		defer testHookGemm(s.d, g, sa, sb, sc, count, bf16)()
	}
	switch {
	case bf16:
		s.fail(s.d.GemmRoundedBatched(g, cuda.BF16, sa, sb, sc, max(count, 1)))
	case count == 0:
		s.fail(s.d.Sgemm(g))
	default:
		s.fail(s.d.SgemmBatched(g, sa, sb, sc, count))
	}
}
