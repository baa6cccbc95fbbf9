package kernel

import (
	"github.com/graphpipe/graphpipe/tensor"
)

// gpuParameter tiles the parameter over the micro-batch's rows; its
// gradient is gy's column sums.
func gpuParameter(k *parameter[float32]) (fwdFn, bwdFn) {
	fwd := func(s *Scope, _, p []*Value[float32]) (*Value[float32], any, error) {
		n, per := k.ctx.Pos.Rows, len(p[0].Data)
		y := s.newValue(append([]int{n}, p[0].Shape...)...)
		yb := s.ActScratch(n * per)
		s.Launch("gp_tile", n*per, s.param(p[0]), yb, per, n*per)
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *Scope, gy *Value[float32], _, _ []*Value[float32], _ *Value[float32], _ any, _, gp []*Value[float32]) {
		if gp == nil || gp[0] == nil {
			return
		}
		b := s.pacc(gp[0])
		s.colSums(s.In(gy), gy.Shape[0], tensor.Size(gp[0].Shape), b)
		s.back(gp[0], b)
	}
	return fwd, bwd
}

// gpuConstant: a float constant is tiled over the rows on the device; an
// int32 one (indices) stays on the host, where its readers take it.
func gpuConstant(k *constant[float32]) (fwdFn, bwdFn) {
	fwd := func(s *Scope, x, p []*Value[float32]) (*Value[float32], any, error) {
		if k.ints {
			return k.Forward(x, p)
		}
		n, per := k.ctx.Pos.Rows, SizeOf(k.shape)
		one := make([]float32, per)
		for i := range one {
			one[i] = float32(k.values[min(i, len(k.values)-1)])
		}
		y := s.newValue(append([]int{n}, k.shape...)...)
		yb := s.ActScratch(n * per)
		s.Launch("gp_tile", n*per, s.constant(one), yb, per, n*per)
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(*Scope, *Value[float32], []*Value[float32], []*Value[float32], *Value[float32], any, []*Value[float32], []*Value[float32]) {
	}
	return fwd, bwd
}
