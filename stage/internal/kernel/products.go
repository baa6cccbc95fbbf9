package kernel

import (
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

func (s *Scope) gemm(g cuda.GemmArgs) { s.product(g, 0, 0, 0, 0) }

func (s *Scope) batched(g cuda.GemmArgs, sa, sb, sc, count int) { s.product(g, sa, sb, sc, count) }

// TestHookGemm, when set (tests), is called before every matrix product a
// kernel runs on the device, with its arguments, the batch strides and
// count (count 0: one product, not batched) and the precision ("fp32",
// "tf32" or "bf16"); the function it returns is called after.
var TestHookGemm func(d *cuda.Device, g cuda.GemmArgs, sa, sb, sc, count int, precision string) func()

// product runs a matrix product (count 0), or count of them at strides sa,
// sb and sc, in the residency's precision.
func (s *Scope) product(g cuda.GemmArgs, sa, sb, sc, count int) {
	if s.err != nil {
		return
	}
	bf16, tf32 := s.bf16(), s.tf32()
	if TestHookGemm != nil {
		p := FP32
		if bf16 {
			p = BF16
		} else if tf32 {
			p = TF32
		}
		defer TestHookGemm(s.d, g, sa, sb, sc, count, p.String())()
	}
	switch {
	case bf16: // a parameter operand's bf16 copy is made once a step (Params.Half); the others' per product
		s.Fail(s.d.GemmRoundedWith(g, cuda.BF16, s.res.Half(s, g.A), s.res.Half(s, g.B), sa, sb, sc, max(count, 1)))
	case tf32 && count == 0:
		s.Fail(s.d.GemmTF32(g))
	case tf32:
		s.Fail(s.d.GemmTF32Batched(g, sa, sb, sc, count))
	case count == 0:
		s.Fail(s.d.Sgemm(g))
	default:
		s.Fail(s.d.SgemmBatched(g, sa, sb, sc, count))
	}
}
