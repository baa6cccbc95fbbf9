package kernel

import (
	"github.com/graphpipe/graphpipe/tensor"
)

func gpuMean(k *mean[float32]) (fwdFn, bwdFn) {
	fwd := func(s *Scope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		shape := append(append([]int(nil), x[0].Shape[:k.axis]...), x[0].Shape[k.axis+1:]...)
		y := s.newValue(shape...)
		outer, l, inner := k.dims(x[0].Shape)
		yb := s.ActScratch(tensor.Size(y.Shape))
		s.Launch("gp_mean", outer*inner, s.In(x[0]), yb, outer, l, inner)
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *Scope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		outer, l, inner := k.dims(x[0].Shape)
		b := s.acc(gx[0])
		s.Launch("gp_mean_bwd", outer*l*inner, s.In(gy), b, outer, l, inner)
		s.back(gx[0], b)
	}
	return fwd, bwd
}

// gpuReduce sums x [n, in...] over the axes (per-sample indices), scaled
// by 1/count for a mean; the backward spreads gy back at x's strides.
func gpuReduce(k *reduce[float32]) (fwdFn, bwdFn) {
	red := make([]int, len(k.in)+1)
	for _, a := range k.axes {
		red[a+1] = 1
	}
	rank := int32(len(k.in) + 1)
	fwd := func(s *Scope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n := x[0].Shape[0]
		y := s.newValue(append([]int{n}, k.out...)...)
		size := tensor.Size(y.Shape)
		yb := s.ActScratch(size)
		s.Launch("gp_reduce", size, s.In(x[0]), yb, s.meta(append([]int{n}, k.in...), red), rank, size, k.scale(), int32(0))
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *Scope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		n := x[0].Shape[0]
		size := tensor.Size(x[0].Shape)
		st := append([]int{SizeOf(k.in) / k.count}, k.stride...)
		b := s.acc(gx[0])
		s.Launch("gp_bcast", size, b, s.In(gy), s.meta(append([]int{n}, k.in...), st), rank, size, int32(5), float32(k.scale())) // gx += sc·gy[map]
		s.back(gx[0], b)
	}
	return fwd, bwd
}
