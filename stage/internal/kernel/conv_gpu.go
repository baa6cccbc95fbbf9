package kernel

import (
	"errors"

	"github.com/graphpipe/graphpipe/tensor"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// The GPU kernels of conv2d, batch_norm, max_pool2d, avg_pool2d and
// global_avg_pool: the CPU kernels' geometry (conv.go) and
// arithmetic, on the device.

// convColElems bounds conv2d's im2col buffer (elements): a micro-batch's
// samples go through in chunks whose columns fit (at least one sample).
var convColElems = 1 << 24

// geometry is the window's arguments to gp_im2col, gp_col2im and the max
// pool kernels after the sample count: c, h, w, oh, ow, kh, kw, sh, sw,
// pt, pl, dh, dw.
func (w window) geometry() []any {
	return []any{w.c, w.h, w.w, w.oh, w.ow, w.kh, w.kw, w.sh, w.sw, w.pt, w.pl, w.dh, w.dw}
}

// gpuConv2D runs conv2d through cuDNN where dnnConv says it can (the
// device has cuDNN, and cuDNN this convolution), else by im2col and GEMM
// (gpuConv2DCols). The two compute the same op in the same layouts, so
// the choice is the device's alone, made per shape and precision.
func gpuConv2D(k *conv2d[float32]) (fwdFn, bwdFn) {
	colF, colB := gpuConv2DCols(k)
	// y [n, out, oh, ow] = x [n, c, h, w] ⊛ W [out, c/groups, kh, kw] (+ b)
	fwd := func(s *Scope, x, p []*Value[float32]) (*Value[float32], any, error) {
		c, ok := s.dnnConv(k, x[0].Shape[0])
		if !ok {
			return colF(s, x, p)
		}
		_, _, ny := c.Sizes()
		y := s.newValue(c.N, k.out, k.oh, k.ow)
		xb, w, yb := s.In(x[0]), s.param(p[0]), s.Scratch(ny)
		s.dnn(func() error { return s.d.ConvForward(c, xb, w, yb) })
		if k.bias {
			b := s.param(p[1])
			s.dnn(func() error { return s.d.ConvAddBias(c, b, yb) })
		}
		s.out(y, yb)
		return y, nil, nil
	}
	// gx += gy ⊛ᵀ W; gW += Σ_n gy ⊛ x; gb += Σ gy per channel
	bwd := func(s *Scope, gy *Value[float32], x, p []*Value[float32], y *Value[float32], st any, gx, gp []*Value[float32]) {
		c, ok := s.dnnConv(k, gy.Shape[0])
		if !ok {
			colB(s, gy, x, p, y, st, gx, gp)
			return
		}
		g := s.In(gy)
		if gx[0] != nil { // written where nothing else has given to it yet (accInto)
			w := s.param(p[0])
			b, fresh := s.accInto(gx[0])
			s.dnn(func() error { return s.d.ConvBackwardData(c, w, g, b, !fresh) })
			s.back(gx[0], b)
		}
		if gp != nil && gp[0] != nil {
			xb, b := s.In(x[0]), s.pacc(gp[0])
			s.dnn(func() error { return s.d.ConvBackwardFilter(c, xb, g, b) })
			s.back(gp[0], b)
		}
		if k.bias && gp != nil && gp[1] != nil {
			b := s.pacc(gp[1])
			s.dnn(func() error { return s.d.ConvBackwardBias(c, g, b) })
			s.back(gp[1], b)
		}
	}
	return fwd, bwd
}

// dnnConv is conv2d k's convolution over n samples for cuDNN, and whether
// cuDNN runs it: where the device has cuDNN, the precision is fp32 or tf32
// (bf16 keeps the im2col path's rounded GEMMs), the padding is the same on
// both sides (cuDNN's descriptors pad symmetrically), cuDNN sizes the
// output as conv2d does and offers an algorithm for it (cuda.ConvReady).
// A cuDNN call that fails fails the scope (true is returned then, so that
// the caller queues nothing more).
func (s *Scope) dnnConv(k *conv2d[float32], n int) (cuda.ConvShape, bool) {
	c := cuda.ConvShape{N: n, C: k.c, H: k.h, W: k.w, K: k.out, KH: k.kh, KW: k.kw, PadH: k.pt, PadW: k.pl,
		StrideH: k.sh, StrideW: k.sw, DilationH: k.dh, DilationW: k.dw, Groups: k.groups, TF32: s.tf32()}
	if s.err != nil || s.opts.im2col || s.bf16() || k.pt != k.padBottom || k.pl != k.padRight {
		return c, false
	}
	if oh, ow := c.Out(); oh != k.oh || ow != k.ow {
		return c, false
	}
	err := s.d.ConvReady(c)
	var unsupported *cuda.ConvUnsupportedError
	if errors.Is(err, cuda.ErrNoDNN) || errors.As(err, &unsupported) {
		return c, false
	}
	s.Fail(err)
	return c, true
}

// dnn runs a cuDNN call unless the scope has failed.
func (s *Scope) dnn(call func() error) {
	if s.err == nil {
		s.Fail(call())
	}
}

// gpuConv2DCols runs conv2d as the CPU kernel does, by im2col and GEMM,
// but channel-major over a chunk of S samples, so that each group is one
// GEMM: col [c·kh·kw, S·oh·ow] (group g's rows g·ckk…), ycm [out, S·oh·ow]
// = W_g[og, ckk]·col_g per group (the groups one strided batch), then
// permuted into y [S, out, oh, ow] with the bias added.
func gpuConv2DCols(k *conv2d[float32]) (fwdFn, bwdFn) {
	_, og, ckk, hw := k.dims()
	rowsCol, in, per := k.c*k.kh*k.kw, k.c*k.h*k.w, k.out*hw
	chunk := func(n int) int { return max(1, min(n, convColElems/max(rowsCol*hw, 1))) }
	im2col := func(s *Scope, x, col cuda.Buffer, m int) {
		s.Launch("gp_im2col", rowsCol*m*hw, append([]any{x, col, m}, k.geometry()...)...)
	}
	fwd := func(s *Scope, x, p []*Value[float32]) (*Value[float32], any, error) {
		n := x[0].Shape[0]
		y := s.newValue(n, k.out, k.oh, k.ow)
		xb, w, yb := s.In(x[0]), s.param(p[0]), s.ActScratch(n*per)
		var bias cuda.Buffer
		if k.bias {
			bias = s.param(p[1])
		}
		S := chunk(n)
		col, ycm := s.ActScratch(rowsCol*S*hw), s.ActScratch(k.out*S*hw)
		for s0 := 0; s0 < n; s0 += S {
			m := min(S, n-s0)
			im2col(s, xb.Offset(s0*in), col, m)
			// ycm_g[og, m·hw] = W_g[og, ckk]·col_g[ckk, m·hw]
			s.batched(cuda.GemmArgs{M: og, N: m * hw, K: ckk, Alpha: 1, A: w, B: col, C: ycm}, og*ckk, ckk*m*hw, og*m*hw, k.groups)
			s.Launch("gp_cm_to_nchw", m*per, ycm, yb.Offset(s0*per), bias, m, k.out, hw)
		}
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *Scope, gy *Value[float32], x, p []*Value[float32], _ *Value[float32], _ any, gx, gp []*Value[float32]) {
		n := gy.Shape[0]
		wantW := gp != nil && gp[0] != nil
		wantB := k.bias && gp != nil && gp[1] != nil
		if gx[0] == nil && !wantW && !wantB {
			return
		}
		S := chunk(n)
		g, w, gycm := s.In(gy), s.param(p[0]), s.ActScratch(k.out*S*hw)
		var xb, col, gxb, gw, gb, ones cuda.Buffer
		if gx[0] != nil || wantW {
			col = s.ActScratch(rowsCol * S * hw)
		}
		if gx[0] != nil {
			gxb = s.acc(gx[0])
		}
		if wantW {
			xb, gw = s.In(x[0]), s.pacc(gp[0])
		}
		if wantB {
			gb, ones = s.pacc(gp[1]), s.ActScratch(S*hw)
			s.Launch("gp_fill", S*hw, ones, float32(1), S*hw)
		}
		for s0 := 0; s0 < n; s0 += S {
			m := min(S, n-s0)
			s.Launch("gp_nchw_to_cm", m*per, g.Offset(s0*per), gycm, m, k.out, hw)
			if wantB { // gb[out] += gycm[out, m·hw]·1
				s.gemm(cuda.GemmArgs{M: k.out, N: 1, K: m * hw, Alpha: 1, Beta: 1, A: gycm, B: ones, C: gb})
			}
			if wantW { // gW_g[og, ckk] += gycm_g[og, m·hw]·col_gᵀ
				im2col(s, xb.Offset(s0*in), col, m)
				s.batched(cuda.GemmArgs{TransB: true, M: og, N: ckk, K: m * hw, Alpha: 1, Beta: 1, A: gycm, B: col, C: gw}, og*m*hw, ckk*m*hw, og*ckk, k.groups)
			}
			if gx[0] != nil { // gcol_g[ckk, m·hw] = W_gᵀ·gycm_g, added back into gx by col2im
				s.batched(cuda.GemmArgs{TransA: true, M: ckk, N: m * hw, K: og, Alpha: 1, A: w, B: gycm, C: col}, og*ckk, og*m*hw, ckk*m*hw, k.groups)
				s.Launch("gp_col2im", m*in, append([]any{col, gxb.Offset(s0 * in), m}, k.geometry()...)...)
			}
		}
		s.back(gx[0], gxb)
		if wantW {
			s.back(gp[0], gw)
		}
		if wantB {
			s.back(gp[1], gb)
		}
	}
	return fwd, bwd
}

// gpuMaxPool keeps each output's argmax (an int per output) for the
// backward, which gathers per input element.
func gpuMaxPool(k *maxPool[float32]) (fwdFn, bwdFn) {
	fwd := func(s *Scope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n := x[0].Shape[0]
		y := s.newValue(n, k.c, k.oh, k.ow)
		size := tensor.Size(y.Shape)
		yb, arg := s.ActScratch(size), s.Scratch(size)
		s.Launch("gp_maxpool", size, append([]any{s.In(x[0]), yb, arg, n * k.c}, k.geometry()[1:]...)...)
		s.out(y, yb)
		return y, s.stash(arg, size), nil
	}
	bwd := func(s *Scope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], st any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		b, fresh := s.accInto(gx[0]) // every input element is written
		args := append([]any{s.unstash(st.(Stashed)), s.In(gy), b, gy.Shape[0] * k.c}, k.geometry()[1:]...)
		s.Launch("gp_maxpool_bwd", tensor.Size(x[0].Shape), append(args, BoolInt(!fresh))...)
		s.back(gx[0], b)
	}
	return fwd, bwd
}

func gpuAvgPool(k *avgPool[float32]) (fwdFn, bwdFn) {
	include := int32(0)
	if k.includePad {
		include = 1
	}
	geom := func(nc int) []any {
		return []any{nc, k.h, k.w, k.oh, k.ow, k.kh, k.kw, k.sh, k.sw, k.pt, k.pl, k.padBottom, k.padRight, include}
	}
	fwd := func(s *Scope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n := x[0].Shape[0]
		y := s.newValue(n, k.c, k.oh, k.ow)
		size := tensor.Size(y.Shape)
		yb := s.ActScratch(size)
		s.Launch("gp_avgpool", size, append([]any{s.In(x[0]), yb}, geom(n*k.c)...)...)
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *Scope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		b := s.acc(gx[0])
		s.Launch("gp_avgpool_bwd", tensor.Size(x[0].Shape), append([]any{s.In(gy), b}, geom(gy.Shape[0]*k.c)...)...)
		s.back(gx[0], b)
	}
	return fwd, bwd
}

// gpuGlobalAvgPool: [n, c, spatial...] → [n, c, 1, ...], row means.
func gpuGlobalAvgPool() (fwdFn, bwdFn) {
	fwd := func(s *Scope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n, c, sz := bnGeometry(x[0].Shape)
		shape := append([]int(nil), x[0].Shape...)
		for i := 2; i < len(shape); i++ {
			shape[i] = 1
		}
		y := s.newValue(shape...)
		yb := s.ActScratch(n * c)
		s.Launch("gp_rowmean", n*c, s.In(x[0]), yb, n*c, sz)
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *Scope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		n, c, sz := bnGeometry(x[0].Shape)
		b := s.acc(gx[0])
		s.Launch("gp_rowmean_bwd", n*c*sz, s.In(gy), b, n*c, sz)
		s.back(gx[0], b)
	}
	return fwd, bwd
}
