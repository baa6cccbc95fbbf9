package kernel

import (
	"github.com/graphpipe/graphpipe/tensor"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// lossBlock is the terms one thread of gp_sum_blocks sums in order: a loss
// of up to lossBlock terms is summed in the host's order exactly.
const lossBlock = 4096

// lossMean is a loss's value, the mean of its n terms summed in float64
// (gp_sum_blocks, then gp_mean_fold): kept on the device with values there
// (the step reads it: devTrain.keepLoss), else brought to the host.
func lossMean(s *Scope, terms cuda.Buffer, n int) *Value[float32] {
	y := s.newValue(1)
	parts := (n + lossBlock - 1) / lossBlock
	pb, yb := s.doubles(max(parts, 1)), s.Scratch(1)
	s.Launch("gp_sum_blocks", parts, terms, pb, n, lossBlock)
	s.Launch("gp_mean_fold", 1, pb, parts, n, yb)
	s.out(y, yb)
	return y
}

func gpuCrossEntropy(k *crossEntropy[float32]) (fwdFn, bwdFn) {
	op := k.op
	fwd := func(s *Scope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n, c := x[0].Shape[0], x[0].Shape[1]
		if err := checkIndices(op, x[1].Ints, c); err != nil {
			return nil, nil, err
		}
		pb, tb := s.Scratch(n*c), s.Scratch(n) // the labels were checked: every row is written
		s.Launch("gp_ce", n, s.In(x[0]), s.ints(x[1]), pb, tb, n, c, s.d.BadFlag())
		return lossMean(s, tb, n), s.stash(pb, n*c), nil
	}
	bwd := func(s *Scope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], st any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		n, c := x[0].Shape[0], x[0].Shape[1]
		b := s.acc(gx[0])
		s.Launch("gp_ce_bwd", n*c, s.unstash(st.(Stashed)), s.ints(x[1]), s.scalar(gy)/float32(n), b, n, c)
		s.back(gx[0], b)
	}
	return fwd, bwd
}

// gpuElementLoss is a loss averaging per-element terms of (x, t): term
// writes them, grad adds g·∂term/∂x into gx0, and targetGrad adds g·∂term/∂t
// into gx1.
func gpuElementLoss(term, grad string, targetGrad func(s *Scope, gt, xb, tb cuda.Buffer, g float32, n int)) (fwdFn, bwdFn) {
	fwd := func(s *Scope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n := tensor.Size(x[0].Shape)
		tb := s.Scratch(n)
		s.Launch(term, n, s.In(x[0]), s.In(x[1]), tb, n)
		return lossMean(s, tb, n), nil, nil
	}
	bwd := func(s *Scope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		n := tensor.Size(x[0].Shape)
		g := s.scalar(gy) / float32(n)
		xb, tb := s.In(x[0]), s.In(x[1])
		if gx[0] != nil {
			b := s.acc(gx[0])
			s.Launch(grad, n, xb, tb, g, b, n)
			s.back(gx[0], b)
		}
		if gx[1] != nil {
			b := s.acc(gx[1])
			targetGrad(s, b, xb, tb, g, n)
			s.back(gx[1], b)
		}
	}
	return fwd, bwd
}

// gpuMSE: (x − t)²; ∂/∂t = −∂/∂x.
func gpuMSE() (fwdFn, bwdFn) {
	return gpuElementLoss("gp_mse", "gp_mse_bwd", func(s *Scope, gt, xb, tb cuda.Buffer, g float32, n int) {
		s.Launch("gp_mse_bwd", n, xb, tb, -g, gt, n)
	})
}

// gpuBCE: max(x,0) − x·t + log(1 + e^−|x|); ∂/∂t = −x.
func gpuBCE() (fwdFn, bwdFn) {
	return gpuElementLoss("gp_bce", "gp_bce_bwd", func(s *Scope, gt, xb, _ cuda.Buffer, g float32, n int) {
		s.Launch("gp_axpy", n, gt, xb, -g, n)
	})
}
