package kernel

import (
	"github.com/graphpipe/graphpipe/tensor"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// gpuLinear is linear on the device; inOut: W is [in, out] (y = x·W).
func gpuLinear(k *linear[float32]) (fwdFn, bwdFn) {
	bias, inOut := k.bias, k.inOut
	dims := func(w *Value[float32]) (int, int) {
		if inOut {
			return w.Shape[0], w.Shape[1]
		}
		return w.Shape[1], w.Shape[0]
	}
	fwd := func(s *Scope, x, p []*Value[float32]) (*Value[float32], any, error) {
		in, out := dims(p[0])
		r := Rows(x[0].Shape)
		y := s.newValue(append(append([]int(nil), x[0].Shape[:len(x[0].Shape)-1]...), out)...)
		xb, w, yb := s.In(x[0]), s.param(p[0]), s.ActScratch(tensor.Size(y.Shape))
		s.gemm(cuda.GemmArgs{TransB: !inOut, M: r, N: out, K: in, Alpha: 1, A: xb, B: w, C: yb}) // y[R,out] = x·Wᵀ (x·W)
		if bias {
			s.Launch("gp_bias", r*out, yb, s.param(p[1]), r, out)
		}
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *Scope, gy *Value[float32], x, p []*Value[float32], _ *Value[float32], _ any, gx, gp []*Value[float32]) {
		in, out := dims(p[0])
		r := Rows(x[0].Shape)
		g := s.In(gy)
		if gx[0] != nil {
			b := s.acc(gx[0])
			s.gemm(cuda.GemmArgs{TransB: inOut, M: r, N: in, K: out, Alpha: 1, Beta: 1, A: g, B: s.param(p[0]), C: b}) // gx += gy·W (gy·Wᵀ)
			s.back(gx[0], b)
		}
		if gp == nil {
			return
		}
		if gp[0] != nil {
			b := s.pacc(gp[0])
			if inOut {
				s.gemm(cuda.GemmArgs{TransA: true, M: in, N: out, K: r, Alpha: 1, Beta: 1, A: s.In(x[0]), B: g, C: b}) // gW += xᵀ·gy
			} else {
				s.gemm(cuda.GemmArgs{TransA: true, M: out, N: in, K: r, Alpha: 1, Beta: 1, A: g, B: s.In(x[0]), C: b}) // gW += gyᵀ·x
			}
			s.back(gp[0], b)
		}
		if bias && gp[1] != nil {
			b := s.pacc(gp[1])
			s.colSums(g, r, out, b)
			s.back(gp[1], b)
		}
	}
	return fwd, bwd
}

// gpuMatMul: a [n, L..., m, k] · b [n, L..., k, p] as one strided batch
// of GEMMs over (sample, leading index).
func gpuMatMul(k *matmul[float32]) (fwdFn, bwdFn) {
	fwd := func(s *Scope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		batch, m, kk, p := k.dims(x[0].Shape, x[1].Shape)
		y := s.newValue(append(append([]int(nil), x[0].Shape[:len(x[0].Shape)-1]...), p)...)
		yb := s.ActScratch(tensor.Size(y.Shape)) // beta 0 (empty when batch is 0)
		if batch > 0 {
			// c[m,p] = a[m,k]·b[k,p] per batch
			s.batched(cuda.GemmArgs{M: m, N: p, K: kk, Alpha: 1, A: s.In(x[0]), B: s.In(x[1]), C: yb}, m*kk, kk*p, m*p, batch)
		}
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *Scope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		batch, m, kk, p := k.dims(x[0].Shape, x[1].Shape)
		if batch == 0 {
			return
		}
		g := s.In(gy)
		if gx[0] != nil { // ga[m,k] += g[m,p]·bᵀ
			b := s.acc(gx[0])
			s.batched(cuda.GemmArgs{TransB: true, M: m, N: kk, K: p, Alpha: 1, Beta: 1, A: g, B: s.In(x[1]), C: b}, m*p, kk*p, m*kk, batch)
			s.back(gx[0], b)
		}
		if gx[1] != nil { // gb[k,p] += aᵀ·g[m,p]
			b := s.acc(gx[1])
			s.batched(cuda.GemmArgs{TransA: true, M: kk, N: p, K: m, Alpha: 1, Beta: 1, A: s.In(x[0]), B: g, C: b}, m*kk, m*p, kk*p, batch)
			s.back(gx[1], b)
		}
	}
	return fwd, bwd
}
