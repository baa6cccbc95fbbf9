package stage

import (
	"errors"
	"fmt"

	"github.com/graphpipe/graphpipe/tensor"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// The GPU kernels of conv2d, batch_norm, max_pool2d, avg_pool2d and
// global_avg_pool: the CPU kernels' geometry (kernels_conv.go) and
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
	fwd := func(s *gpuScope, x, p []*Value[float32]) (*Value[float32], any, error) {
		c, ok := s.dnnConv(k, x[0].Shape[0])
		if !ok {
			return colF(s, x, p)
		}
		_, _, ny := c.Sizes()
		y := s.newValue(c.N, k.out, k.oh, k.ow)
		xb, w, yb := s.in(x[0]), s.param(p[0]), s.scratch(ny)
		s.dnn(func() error { return s.d.ConvForward(c, xb, w, yb) })
		if k.bias {
			b := s.param(p[1])
			s.dnn(func() error { return s.d.ConvAddBias(c, b, yb) })
		}
		s.out(y, yb)
		return y, nil, nil
	}
	// gx += gy ⊛ᵀ W; gW += Σ_n gy ⊛ x; gb += Σ gy per channel
	bwd := func(s *gpuScope, gy *Value[float32], x, p []*Value[float32], y *Value[float32], st any, gx, gp []*Value[float32]) {
		c, ok := s.dnnConv(k, gy.Shape[0])
		if !ok {
			colB(s, gy, x, p, y, st, gx, gp)
			return
		}
		g := s.in(gy)
		if gx[0] != nil { // written where nothing else has given to it yet (accInto)
			w := s.param(p[0])
			b, fresh := s.accInto(gx[0])
			s.dnn(func() error { return s.d.ConvBackwardData(c, w, g, b, !fresh) })
			s.back(gx[0], b)
		}
		if gp != nil && gp[0] != nil {
			xb, b := s.in(x[0]), s.acc(gp[0])
			s.dnn(func() error { return s.d.ConvBackwardFilter(c, xb, g, b) })
			s.back(gp[0], b)
		}
		if k.bias && gp != nil && gp[1] != nil {
			b := s.acc(gp[1])
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
func (s *gpuScope) dnnConv(k *conv2d[float32], n int) (cuda.ConvShape, bool) {
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
	s.fail(err)
	return c, true
}

// dnn runs a cuDNN call unless the scope has failed.
func (s *gpuScope) dnn(call func() error) {
	if s.err == nil {
		s.fail(call())
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
	im2col := func(s *gpuScope, x, col cuda.Buffer, m int) {
		s.launch("gp_im2col", rowsCol*m*hw, append([]any{x, col, m}, k.geometry()...)...)
	}
	fwd := func(s *gpuScope, x, p []*Value[float32]) (*Value[float32], any, error) {
		n := x[0].Shape[0]
		y := s.newValue(n, k.out, k.oh, k.ow)
		xb, w, yb := s.in(x[0]), s.param(p[0]), s.scratch(n*per)
		var bias cuda.Buffer
		if k.bias {
			bias = s.param(p[1])
		}
		S := chunk(n)
		col, ycm := s.scratch(rowsCol*S*hw), s.scratch(k.out*S*hw)
		for s0 := 0; s0 < n; s0 += S {
			m := min(S, n-s0)
			im2col(s, xb.Offset(s0*in), col, m)
			// ycm_g[og, m·hw] = W_g[og, ckk]·col_g[ckk, m·hw]
			s.batched(cuda.GemmArgs{M: og, N: m * hw, K: ckk, Alpha: 1, A: w, B: col, C: ycm}, og*ckk, ckk*m*hw, og*m*hw, k.groups)
			s.launch("gp_cm_to_nchw", m*per, ycm, yb.Offset(s0*per), bias, m, k.out, hw)
		}
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, p []*Value[float32], _ *Value[float32], _ any, gx, gp []*Value[float32]) {
		n := gy.Shape[0]
		wantW := gp != nil && gp[0] != nil
		wantB := k.bias && gp != nil && gp[1] != nil
		if gx[0] == nil && !wantW && !wantB {
			return
		}
		S := chunk(n)
		g, w, gycm := s.in(gy), s.param(p[0]), s.scratch(k.out*S*hw)
		var xb, col, gxb, gw, gb, ones cuda.Buffer
		if gx[0] != nil || wantW {
			col = s.scratch(rowsCol * S * hw)
		}
		if gx[0] != nil {
			gxb = s.acc(gx[0])
		}
		if wantW {
			xb, gw = s.in(x[0]), s.acc(gp[0])
		}
		if wantB {
			gb, ones = s.acc(gp[1]), s.scratch(S*hw)
			s.launch("gp_fill", S*hw, ones, float32(1), S*hw)
		}
		for s0 := 0; s0 < n; s0 += S {
			m := min(S, n-s0)
			s.launch("gp_nchw_to_cm", m*per, g.Offset(s0*per), gycm, m, k.out, hw)
			if wantB { // gb[out] += gycm[out, m·hw]·1
				s.gemm(cuda.GemmArgs{M: k.out, N: 1, K: m * hw, Alpha: 1, Beta: 1, A: gycm, B: ones, C: gb})
			}
			if wantW { // gW_g[og, ckk] += gycm_g[og, m·hw]·col_gᵀ
				im2col(s, xb.Offset(s0*in), col, m)
				s.batched(cuda.GemmArgs{TransB: true, M: og, N: ckk, K: m * hw, Alpha: 1, Beta: 1, A: gycm, B: col, C: gw}, og*m*hw, ckk*m*hw, og*ckk, k.groups)
			}
			if gx[0] != nil { // gcol_g[ckk, m·hw] = W_gᵀ·gycm_g, added back into gx by col2im
				s.batched(cuda.GemmArgs{TransA: true, M: ckk, N: m * hw, K: og, Alpha: 1, A: w, B: gycm, C: col}, og*ckk, og*m*hw, ckk*m*hw, k.groups)
				s.launch("gp_col2im", m*in, append([]any{col, gxb.Offset(s0 * in), m}, k.geometry()...)...)
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

type gpuBNStash struct{ xhat, rstd stashBuf }

// doubles is n float64s of device memory.
func (s *gpuScope) doubles(n int) cuda.Buffer { return s.scratch(2 * n) }

// gpuBatchNormEval is batch_norm in evaluation: x normalised by the running
// statistics, which stay as they are (their mean and 1/√(var + eps) taken
// in double on the device, as the CPU kernel takes them).
func gpuBatchNormEval(s *gpuScope, k *batchNorm[float32], x *Value[float32], p []*Value[float32]) *Value[float32] {
	n, c, sz := bnGeometry(x.Shape)
	mean, rstd := s.doubles(c), s.doubles(c)
	s.launch("gp_bn_eval_stats", c, s.buffer(p[2]), s.buffer(p[3]), mean, rstd, k.eps, c)
	y := s.newValue(x.Shape...)
	size := tensor.Size(y.Shape)
	xh, yb := s.scratch(size), s.scratch(size)
	s.launch("gp_bn_apply", size, s.in(x), mean, rstd, s.param(p[0]), s.param(p[1]), xh, yb, n, c, sz)
	s.out(y, yb)
	return y
}

// bnRunning moves batch_norm's running statistics by the micro-batch's
// mean and (biased) variance, on the device, in the CPU kernel's double
// arithmetic (gp_bn_running).
func bnRunning(s *gpuScope, k *batchNorm[float32], p []*Value[float32], mean, vr cuda.Buffer, c, cnt int) {
	rm, rv := s.buffer(p[2]), s.buffer(p[3])
	s.launch("gp_bn_running", c, mean, vr, rm, rv, k.momentum, float64(cnt), c) // PyTorch: the running variance is the unbiased one
	s.backBuffer(p[2], rm)
	s.backBuffer(p[3], rv)
}

// foldParts folds batch_norm's partial sums part [parts, c, lanes]
// (doubles) into out [c], divided by div, in a fixed order: each part's
// lanes first (gp_fold_lanes_d, a thread per part and channel), then the
// parts (gp_fold_d, a thread per channel), so that no thread sums more
// than max(lanes, parts) values in turn: ResNet's 64 parts of 32 lanes
// were 2048 loads for each of a handful of threads, a launch that waits on
// memory rather than reading it.
func (s *gpuScope) foldParts(part, out cuda.Buffer, parts, c, lanes int, div float64) {
	if lanes > 1 {
		mid := s.doubles(parts * c)
		s.launch("gp_fold_lanes_d", parts*c, part, mid, parts*c, lanes)
		part, lanes = mid, 1
	}
	s.launch("gp_fold_d", c, part, out, parts, c, lanes, div)
}

// bnLanes is how many threads share a (sample, channel) plane of sz values
// in batch_norm's sums: lnLanes side by side where the plane is that long
// (neighbouring threads read neighbouring values), else one.
func bnLanes(sz int) int {
	if sz >= lnLanes {
		return lnLanes
	}
	return 1
}

// gpuBatchNorm is batch_norm in training mode: through cuDNN's batch norm
// where the device has cuDNN (dnnBN, gpuBatchNormDNN), else graphpipe's
// kernels: the channel statistics in double (two-pass sums, folded in a
// fixed order), and the running statistics moved by them on the device
// (bnRunning). At ResNet-50's layer1 on an H200 the two cost about the
// same (TestConvTimesOnGPU, fp32, bench/gpu/results/2026-11-27-h200/bn-find:
// cuDNN's forward 0.166 ms and input gradient, its whole backward, 0.351;
// graphpipe's 0.278 and 0.249); cuDNN's is taken for what it stashes (two
// values per channel, not x̂).
//
// What it costs, against cuDNN's batch norm (which PyTorch's eager
// ResNet-50 runs): its kernels move about 48 bytes per value of x in a
// step (forward: x read by the two sums and the apply, x̂ and y written,
// 20; backward: gy and x̂ read by the sums and again by gp_bn_bwd_x, gx
// read and written, 24, and gx's accumulator zeroed, 4), cuDNN's about 32.
// ResNet-50 normalises 11.1 M values a sample, 711 M at batch 64: 34 GB a
// step, about 8 ms at an H200's 4.8 TB/s, against about 6 ms for cuDNN's,
// where PyTorch's whole tf32 step is 50 ms. So the double-precision sums
// stay (they match the CPU's statistics), as long as no thread sums
// thousands of partial sums in turn (foldParts). TestConvTimesOnGPU times
// a ResNet layer's batch norm beside its convolutions.
func gpuBatchNorm(k *batchNorm[float32]) (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, p []*Value[float32]) (*Value[float32], any, error) {
		if k.ctx != nil && k.ctx.pos.Eval {
			return gpuBatchNormEval(s, k, x[0], p), nil, nil
		}
		n, c, sz := bnGeometry(x[0].Shape)
		cnt := n * sz
		if cnt < 2 {
			return nil, nil, &OpError{k.op, fmt.Sprintf("batch_norm needs more than one value per channel in training; a micro-batch of %d with %d per sample has %d", n, sz, cnt)}
		}
		if b, ok := s.dnnBN(n, c, sz); ok {
			return gpuBatchNormDNN(s, k, b, x[0], p)
		}
		y := s.newValue(x[0].Shape...)
		size := tensor.Size(y.Shape)
		chunk, parts := colParts(n, c)
		lanes := bnLanes(sz)
		xb, part := s.in(x[0]), s.doubles(parts*c*lanes)
		mean, vr, rstd := s.doubles(c), s.doubles(c), s.doubles(c)
		s.launch("gp_bn_part", parts*c*lanes, xb, cuda.Buffer{}, part, n, c, sz, chunk, parts, lanes)
		s.foldParts(part, mean, parts, c, lanes, float64(cnt))
		s.launch("gp_bn_part", parts*c*lanes, xb, mean, part, n, c, sz, chunk, parts, lanes)
		s.foldParts(part, vr, parts, c, lanes, float64(cnt))
		s.launch("gp_bn_rstd", c, vr, rstd, k.eps, c)
		xh, yb := s.scratch(size), s.scratch(size)
		s.launch("gp_bn_apply", size, xb, mean, rstd, s.param(p[0]), s.param(p[1]), xh, yb, n, c, sz)
		if k.ctx == nil || !k.ctx.recomputing { // a recomputation leaves them as the first forward moved them
			bnRunning(s, k, p, mean, vr, c, cnt)
		}
		s.out(y, yb)
		return y, &gpuBNStash{xhat: s.stash(xh, size), rstd: s.stash(rstd, 2*c)}, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, p []*Value[float32], _ *Value[float32], st0 any, gx, gp []*Value[float32]) {
		if st, ok := st0.(*gpuBNDNNStash); ok {
			gpuBatchNormDNNBack(s, k, st, gy, x[0], p, gx, gp)
			return
		}
		st := st0.(*gpuBNStash)
		bnOwnBack(s, gy, s.unstash(st.xhat), s.unstash(st.rstd), p, gx, gp)
	}
	return fwd, bwd
}

// bnOwnBack adds batch_norm's gradients with graphpipe's kernels, from
// the forward's x̂ and its channels' 1/√(var + eps) in double.
func bnOwnBack(s *gpuScope, gy *Value[float32], xh, rstd cuda.Buffer, p, gx, gp []*Value[float32]) {
	wantW, wantB := gp != nil && gp[0] != nil, gp != nil && gp[1] != nil
	if gx[0] == nil && !wantW && !wantB {
		return
	}
	n, c, sz := bnGeometry(gy.Shape)
	chunk, parts := colParts(n, c)
	lanes := bnLanes(sz)
	g := s.in(gy)
	p1, p2, sg, sgx := s.doubles(parts*c*lanes), s.doubles(parts*c*lanes), s.doubles(c), s.doubles(c)
	s.launch("gp_bn_bwd_part", parts*c*lanes, g, xh, p1, p2, n, c, sz, chunk, parts, lanes)
	s.foldParts(p1, sg, parts, c, lanes, 1.0)
	s.foldParts(p2, sgx, parts, c, lanes, 1.0)
	if wantW || wantB {
		var gw, gb cuda.Buffer
		if wantW {
			gw = s.acc(gp[0])
		}
		if wantB {
			gb = s.acc(gp[1])
		}
		s.launch("gp_bn_bwd_p", c, sg, sgx, gw, gb, c)
		if wantW {
			s.back(gp[0], gw)
		}
		if wantB {
			s.back(gp[1], gb)
		}
	}
	if gx[0] != nil {
		b := s.acc(gx[0])
		s.launch("gp_bn_bwd_x", tensor.Size(gy.Shape), g, xh, s.param(p[0]), rstd, sg, sgx, b, n, c, sz)
		s.back(gx[0], b)
	}
}

// dnnBN is batch_norm's shape over n samples for cuDNN, and whether
// cuDNN runs it: where the device has cuDNN (as conv2d, whatever the
// precision: batch norm's data is FP32 in all three) and cuDNN takes the
// shape (cuda.BNReady). A cuDNN call that fails fails the scope (true is
// returned then, so that the caller queues nothing more).
func (s *gpuScope) dnnBN(n, c, sz int) (cuda.BNShape, bool) {
	b := cuda.BNShape{N: n, C: c, S: sz}
	if s.err != nil || s.opts.im2col {
		return b, false
	}
	err := s.d.BNReady(b)
	var unsupported *cuda.BNUnsupportedError
	if errors.Is(err, cuda.ErrNoDNN) || errors.As(err, &unsupported) {
		return b, false
	}
	s.fail(err)
	return b, true
}

// gpuBNDNNStash is what cuDNN's batch norm backward reads besides x: the
// forward's channel mean and 1/√(var + eps), [C] each.
type gpuBNDNNStash struct{ mean, invStd stashBuf }

// gpuBatchNormDNN is batch_norm in training through cuDNN: its statistics
// in FP32 (graphpipe's own kernels take them in double), its stash two
// values per channel where the kernels keep x̂, the size of x. The running
// statistics move as bnRunning moves them, unless recomputing.
func gpuBatchNormDNN(s *gpuScope, k *batchNorm[float32], b cuda.BNShape, x *Value[float32], p []*Value[float32]) (*Value[float32], any, error) {
	y := s.newValue(x.Shape...)
	xb, yb := s.in(x), s.scratch(tensor.Size(y.Shape))
	mean, inv := s.scratch(b.C), s.scratch(b.C)
	w, bias := s.param(p[0]), s.param(p[1])
	run := cuda.BNRunning{Momentum: k.momentum}
	moving := k.ctx == nil || !k.ctx.recomputing
	if moving {
		run.Mean, run.Var = s.buffer(p[2]), s.buffer(p[3])
	}
	s.dnn(func() error { return s.d.BNForwardTraining(b, k.eps, xb, w, bias, yb, mean, inv, run) })
	if moving {
		s.backBuffer(p[2], run.Mean)
		s.backBuffer(p[3], run.Var)
	}
	s.out(y, yb)
	return y, &gpuBNDNNStash{mean: s.stash(mean, b.C), invStd: s.stash(inv, b.C)}, nil
}

// gpuBatchNormDNNBack adds batch_norm's gradients through cuDNN, each
// accumulated into its buffer (cuDNN's betas 1).
func gpuBatchNormDNNBack(s *gpuScope, k *batchNorm[float32], st *gpuBNDNNStash, gy, x *Value[float32], p, gx, gp []*Value[float32]) {
	wantW, wantB := gp != nil && gp[0] != nil, gp != nil && gp[1] != nil
	if gx[0] == nil && !wantW && !wantB {
		return
	}
	n, c, sz := bnGeometry(gy.Shape)
	b := cuda.BNShape{N: n, C: c, S: sz}
	if s.err == nil && s.d.BNReady(b) != nil {
		// cuDNN was dropped since the forward (a later plan failed): its
		// saved statistics make x̂ and 1/σ for graphpipe's kernels
		xh, rstd := s.scratch(tensor.Size(x.Shape)), s.doubles(c)
		s.launch("gp_bn_restore", tensor.Size(x.Shape), s.in(x), s.unstash(st.mean), s.unstash(st.invStd), xh, rstd, n, c, sz)
		bnOwnBack(s, gy, xh, rstd, p, gx, gp)
		return
	}
	var gxb, gw, gb cuda.Buffer
	fresh := false
	if gx[0] != nil {
		gxb, fresh = s.accInto(gx[0])
	}
	if wantW {
		gw = s.acc(gp[0])
	}
	if wantB {
		gb = s.acc(gp[1])
	}
	g, xb, w := s.in(gy), s.in(x), s.param(p[0])
	mean, inv := s.unstash(st.mean), s.unstash(st.invStd)
	s.dnn(func() error { return s.d.BNBackward(b, k.eps, xb, g, w, mean, inv, gxb, gw, gb, !fresh) })
	if wantW {
		s.back(gp[0], gw)
	}
	if wantB {
		s.back(gp[1], gb)
	}
	if gx[0] != nil {
		s.back(gx[0], gxb)
	}
}

// gpuMaxPool keeps each output's argmax (an int per output) for the
// backward, which gathers per input element.
func gpuMaxPool(k *maxPool[float32]) (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n := x[0].Shape[0]
		y := s.newValue(n, k.c, k.oh, k.ow)
		size := tensor.Size(y.Shape)
		yb, arg := s.scratch(size), s.scratch(size)
		s.launch("gp_maxpool", size, append([]any{s.in(x[0]), yb, arg, n * k.c}, k.geometry()[1:]...)...)
		s.out(y, yb)
		return y, s.stash(arg, size), nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], st any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		b, fresh := s.accInto(gx[0]) // every input element is written
		args := append([]any{s.unstash(st.(stashBuf)), s.in(gy), b, gy.Shape[0] * k.c}, k.geometry()[1:]...)
		s.launch("gp_maxpool_bwd", tensor.Size(x[0].Shape), append(args, boolInt(!fresh))...)
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
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n := x[0].Shape[0]
		y := s.newValue(n, k.c, k.oh, k.ow)
		size := tensor.Size(y.Shape)
		yb := s.scratch(size)
		s.launch("gp_avgpool", size, append([]any{s.in(x[0]), yb}, geom(n*k.c)...)...)
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		b := s.acc(gx[0])
		s.launch("gp_avgpool_bwd", tensor.Size(x[0].Shape), append([]any{s.in(gy), b}, geom(gy.Shape[0]*k.c)...)...)
		s.back(gx[0], b)
	}
	return fwd, bwd
}

// gpuGlobalAvgPool: [n, c, spatial...] → [n, c, 1, ...], row means.
func gpuGlobalAvgPool() (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n, c, sz := bnGeometry(x[0].Shape)
		shape := append([]int(nil), x[0].Shape...)
		for i := 2; i < len(shape); i++ {
			shape[i] = 1
		}
		y := s.newValue(shape...)
		yb := s.scratch(n * c)
		s.launch("gp_rowmean", n*c, s.in(x[0]), yb, n*c, sz)
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		n, c, sz := bnGeometry(x[0].Shape)
		b := s.acc(gx[0])
		s.launch("gp_rowmean_bwd", n*c*sz, s.in(gy), b, n*c, sz)
		s.back(gx[0], b)
	}
	return fwd, bwd
}
