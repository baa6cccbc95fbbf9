package kernel

import (
	"github.com/graphpipe/graphpipe/tensor"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// checkIndices refuses an index outside [0, num) before anything runs, as
// the CPU kernels do, with the same error.
func checkIndices(op string, idx []int32, num int) error {
	for _, v := range idx {
		if err := checkIndex(op, v, num); err != nil {
			return err
		}
	}
	return nil
}

func gpuEmbedding(k *embedding[float32]) (fwdFn, bwdFn) {
	op, num, dim := k.op, k.num, k.dim
	fwd := func(s *Scope, x, p []*Value[float32]) (*Value[float32], any, error) {
		if err := checkIndices(op, x[0].Ints, num); err != nil {
			return nil, nil, err
		}
		y := s.newValue(append(append([]int(nil), x[0].Shape...), dim)...)
		n := len(x[0].Ints)
		yb := s.ActScratch(tensor.Size(y.Shape)) // the indices were checked: every row is written
		s.Launch("gp_embedding", n*dim, s.ints(x[0]), s.param(p[0]), yb, n, dim, num, s.d.BadFlag())
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *Scope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, _, gp []*Value[float32]) {
		if gp == nil || gp[0] == nil {
			return
		}
		n := len(x[0].Ints)
		b := s.pacc(gp[0])
		s.Launch("gp_embedding_bwd", n*dim, s.ints(x[0]), s.In(gy), b, n, dim, num)
		s.back(gp[0], b)
	}
	return fwd, bwd
}

func gpuEmbeddingBag(k *embeddingBag[float32]) (fwdFn, bwdFn) {
	op, num, dim := k.op, k.num, k.dim
	m := int32(0)
	if k.mean {
		m = 1
	}
	fwd := func(s *Scope, x, p []*Value[float32]) (*Value[float32], any, error) {
		if err := checkIndices(op, x[0].Ints, num); err != nil {
			return nil, nil, err
		}
		n, bag := x[0].Shape[0], x[0].Shape[1]
		y := s.newValue(n, dim)
		yb := s.ActScratch(tensor.Size(y.Shape))
		s.Launch("gp_embedding_bag", n*dim, s.ints(x[0]), s.param(p[0]), yb, n, bag, dim, num, m, s.d.BadFlag())
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *Scope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, _, gp []*Value[float32]) {
		if gp == nil || gp[0] == nil {
			return
		}
		n, bag := x[0].Shape[0], x[0].Shape[1]
		b := s.pacc(gp[0])
		s.Launch("gp_embedding_bag_bwd", n*bag*dim, s.ints(x[0]), s.In(gy), b, n, bag, dim, num, m)
		s.back(gp[0], b)
	}
	return fwd, bwd
}

func gpuDot() (fwdFn, bwdFn) {
	fwd := func(s *Scope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n, d, m := x[0].Shape[0], x[0].Shape[1], len(x)
		pairs := m * (m - 1) / 2
		y := s.newValue(n, pairs)
		xs := make([]cuda.Buffer, m)
		for i := range x {
			xs[i] = s.In(x[i])
		}
		yb := s.ActScratch(tensor.Size(y.Shape)) // the pairs cover it
		p := 0
		for i := 0; i < m; i++ {
			for j := i + 1; j < m; j++ {
				s.Launch("gp_dot_pair", n, xs[i], xs[j], yb, n, d, pairs, p)
				p++
			}
		}
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *Scope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		n, d, m := x[0].Shape[0], x[0].Shape[1], len(x)
		pairs := m * (m - 1) / 2
		g := s.In(gy)
		xs, gs := make([]cuda.Buffer, m), make([]cuda.Buffer, m)
		for i := range x {
			xs[i], gs[i] = s.In(x[i]), s.grad(gx[i], n*d)
		}
		p := 0
		for i := 0; i < m; i++ {
			for j := i + 1; j < m; j++ {
				s.Launch("gp_dot_pair_bwd", n*d, g, xs[j], gs[i], n, d, pairs, p)
				s.Launch("gp_dot_pair_bwd", n*d, g, xs[i], gs[j], n, d, pairs, p)
				p++
			}
		}
		for i := range x {
			s.back(gx[i], gs[i])
		}
	}
	return fwd, bwd
}
