package kernel

import (
	"errors"
	"fmt"

	"github.com/graphpipe/graphpipe/tensor"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

type gpuLNStash struct{ mean, rstd Stashed }

// lnLanes is LANES in kernels.cu: threads that share one row's sums.
const lnLanes = 32

func gpuLayerNorm(k *layerNorm[float32]) (fwdFn, bwdFn) {
	eps := k.eps
	fwd := func(s *Scope, x, p []*Value[float32]) (*Value[float32], any, error) {
		d := p[0].Shape[0]
		r := Rows(x[0].Shape)
		y := s.newValue(x[0].Shape...)
		yb, mb, rb := s.ActScratch(tensor.Size(y.Shape)), s.Scratch(r), s.Scratch(r)
		xb, part := s.In(x[0]), s.Scratch(r*lnLanes)
		s.Launch("gp_layernorm_part", r*lnLanes, xb, cuda.Buffer{}, part, r, d)
		s.Launch("gp_layernorm_fold", r, part, mb, r, d, float32(0), int32(0))
		s.Launch("gp_layernorm_part", r*lnLanes, xb, mb, part, r, d)
		s.Launch("gp_layernorm_fold", r, part, rb, r, d, eps, int32(1))
		s.Launch("gp_layernorm_apply", r*d, xb, s.param(p[0]), s.param(p[1]), mb, rb, yb, r, d)
		s.out(y, yb)
		return y, &gpuLNStash{mean: s.stash(mb, r), rstd: s.stash(rb, r)}, nil
	}
	bwd := func(s *Scope, gy *Value[float32], x, p []*Value[float32], _ *Value[float32], st0 any, gx, gp []*Value[float32]) {
		st := st0.(*gpuLNStash)
		d := p[0].Shape[0]
		r := Rows(x[0].Shape)
		xb, g, mb, rb := s.In(x[0]), s.In(gy), s.unstash(st.mean), s.unstash(st.rstd)
		if gx[0] != nil {
			b := s.acc(gx[0])
			p1, p2, s1, s2 := s.Scratch(r*lnLanes), s.Scratch(r*lnLanes), s.Scratch(r), s.Scratch(r)
			s.Launch("gp_layernorm_bwd_x_part", r*lnLanes, xb, s.param(p[0]), mb, rb, g, p1, p2, r, d)
			s.Launch("gp_layernorm_fold", r, p1, s1, r, d, float32(0), int32(0))
			s.Launch("gp_layernorm_fold", r, p2, s2, r, d, float32(0), int32(0))
			s.Launch("gp_layernorm_bwd_x_apply", r*d, xb, s.param(p[0]), mb, rb, g, s1, s2, b, r, d)
			s.back(gx[0], b)
		}
		if gp != nil && (gp[0] != nil || gp[1] != nil) {
			gg, gb := s.paramGrad(gp[0], d), s.paramGrad(gp[1], d)
			if chunk, parts := colParts(r, d); parts > 0 {
				pg, pb := s.Scratch(parts*d), s.Scratch(parts*d)
				s.Launch("gp_layernorm_bwd_p_part", parts*d, xb, mb, rb, g, pg, pb, r, d, chunk, parts)
				s.Launch("gp_colsum_fold", d, pg, gg, parts, d)
				s.Launch("gp_colsum_fold", d, pb, gb, parts, d)
			}
			s.back(gp[0], gg)
			s.back(gp[1], gb)
		}
	}
	return fwd, bwd
}

type gpuBNStash struct{ xhat, rstd Stashed }

// doubles is n float64s of device memory.
func (s *Scope) doubles(n int) cuda.Buffer { return s.Scratch(2 * n) }

// gpuBatchNormEval is batch_norm in evaluation: x normalised by the running
// statistics, which stay as they are (their mean and 1/√(var + eps) taken
// in double on the device, as the CPU kernel takes them).
func gpuBatchNormEval(s *Scope, k *batchNorm[float32], x *Value[float32], p []*Value[float32]) *Value[float32] {
	n, c, sz := bnGeometry(x.Shape)
	mean, rstd := s.doubles(c), s.doubles(c)
	s.Launch("gp_bn_eval_stats", c, s.buffer(p[2]), s.buffer(p[3]), mean, rstd, k.eps, c)
	y := s.newValue(x.Shape...)
	size := tensor.Size(y.Shape)
	xh, yb := s.Scratch(size), s.ActScratch(size)
	s.Launch("gp_bn_apply", size, s.In(x), mean, rstd, s.param(p[0]), s.param(p[1]), xh, yb, n, c, sz)
	s.out(y, yb)
	return y
}

// bnRunning moves batch_norm's running statistics by the micro-batch's
// mean and (biased) variance, on the device, in the CPU kernel's double
// arithmetic (gp_bn_running).
func bnRunning(s *Scope, k *batchNorm[float32], p []*Value[float32], mean, vr cuda.Buffer, c, cnt int) {
	rm, rv := s.buffer(p[2]), s.buffer(p[3])
	s.Launch("gp_bn_running", c, mean, vr, rm, rv, k.momentum, float64(cnt), c) // PyTorch: the running variance is the unbiased one
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
func (s *Scope) foldParts(part, out cuda.Buffer, parts, c, lanes int, div float64) {
	if lanes > 1 {
		mid := s.doubles(parts * c)
		s.Launch("gp_fold_lanes_d", parts*c, part, mid, parts*c, lanes)
		part, lanes = mid, 1
	}
	s.Launch("gp_fold_d", c, part, out, parts, c, lanes, div)
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
	fwd := func(s *Scope, x, p []*Value[float32]) (*Value[float32], any, error) {
		if k.ctx != nil && k.ctx.Pos.Eval {
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
		xb, part := s.In(x[0]), s.doubles(parts*c*lanes)
		mean, vr, rstd := s.doubles(c), s.doubles(c), s.doubles(c)
		s.Launch("gp_bn_part", parts*c*lanes, xb, cuda.Buffer{}, part, n, c, sz, chunk, parts, lanes)
		s.foldParts(part, mean, parts, c, lanes, float64(cnt))
		s.Launch("gp_bn_part", parts*c*lanes, xb, mean, part, n, c, sz, chunk, parts, lanes)
		s.foldParts(part, vr, parts, c, lanes, float64(cnt))
		s.Launch("gp_bn_rstd", c, vr, rstd, k.eps, c)
		xh, yb := s.Scratch(size), s.ActScratch(size)
		s.Launch("gp_bn_apply", size, xb, mean, rstd, s.param(p[0]), s.param(p[1]), xh, yb, n, c, sz)
		if k.ctx == nil || !k.ctx.Recomputing { // a recomputation leaves them as the first forward moved them
			bnRunning(s, k, p, mean, vr, c, cnt)
		}
		s.out(y, yb)
		return y, &gpuBNStash{xhat: s.stash(xh, size), rstd: s.stash(rstd, 2*c)}, nil
	}
	bwd := func(s *Scope, gy *Value[float32], x, p []*Value[float32], _ *Value[float32], st0 any, gx, gp []*Value[float32]) {
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
func bnOwnBack(s *Scope, gy *Value[float32], xh, rstd cuda.Buffer, p, gx, gp []*Value[float32]) {
	wantW, wantB := gp != nil && gp[0] != nil, gp != nil && gp[1] != nil
	if gx[0] == nil && !wantW && !wantB {
		return
	}
	n, c, sz := bnGeometry(gy.Shape)
	chunk, parts := colParts(n, c)
	lanes := bnLanes(sz)
	g := s.In(gy)
	p1, p2, sg, sgx := s.doubles(parts*c*lanes), s.doubles(parts*c*lanes), s.doubles(c), s.doubles(c)
	s.Launch("gp_bn_bwd_part", parts*c*lanes, g, xh, p1, p2, n, c, sz, chunk, parts, lanes)
	s.foldParts(p1, sg, parts, c, lanes, 1.0)
	s.foldParts(p2, sgx, parts, c, lanes, 1.0)
	if wantW || wantB {
		var gw, gb cuda.Buffer
		if wantW {
			gw = s.pacc(gp[0])
		}
		if wantB {
			gb = s.pacc(gp[1])
		}
		s.Launch("gp_bn_bwd_p", c, sg, sgx, gw, gb, c)
		if wantW {
			s.back(gp[0], gw)
		}
		if wantB {
			s.back(gp[1], gb)
		}
	}
	if gx[0] != nil {
		b := s.acc(gx[0])
		s.Launch("gp_bn_bwd_x", tensor.Size(gy.Shape), g, xh, s.param(p[0]), rstd, sg, sgx, b, n, c, sz)
		s.back(gx[0], b)
	}
}

// dnnBN is batch_norm's shape over n samples for cuDNN, and whether
// cuDNN runs it: where the device has cuDNN (as conv2d, whatever the
// precision but bf16, whose activations cuDNN's FP32 batch norm would not
// read: batch norm's data is FP32 in fp32 and tf32) and cuDNN takes the
// shape (cuda.BNReady). A cuDNN call that fails fails the scope (true is
// returned then, so that the caller queues nothing more).
func (s *Scope) dnnBN(n, c, sz int) (cuda.BNShape, bool) {
	b := cuda.BNShape{N: n, C: c, S: sz}
	if s.err != nil || s.opts.im2col || s.half() {
		return b, false
	}
	err := s.d.BNReady(b)
	var unsupported *cuda.BNUnsupportedError
	if errors.Is(err, cuda.ErrNoDNN) || errors.As(err, &unsupported) {
		return b, false
	}
	s.Fail(err)
	return b, true
}

// gpuBNDNNStash is what cuDNN's batch norm backward reads besides x: the
// forward's channel mean and 1/√(var + eps), [C] each.
type gpuBNDNNStash struct{ mean, invStd Stashed }

// gpuBatchNormDNN is batch_norm in training through cuDNN: its statistics
// in FP32 (graphpipe's own kernels take them in double), its stash two
// values per channel where the kernels keep x̂, the size of x. The running
// statistics move as bnRunning moves them, unless recomputing.
func gpuBatchNormDNN(s *Scope, k *batchNorm[float32], b cuda.BNShape, x *Value[float32], p []*Value[float32]) (*Value[float32], any, error) {
	y := s.newValue(x.Shape...)
	xb, yb := s.In(x), s.Scratch(tensor.Size(y.Shape))
	mean, inv := s.Scratch(b.C), s.Scratch(b.C)
	w, bias := s.param(p[0]), s.param(p[1])
	run := cuda.BNRunning{Momentum: k.momentum}
	moving := k.ctx == nil || !k.ctx.Recomputing
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
func gpuBatchNormDNNBack(s *Scope, k *batchNorm[float32], st *gpuBNDNNStash, gy, x *Value[float32], p, gx, gp []*Value[float32]) {
	wantW, wantB := gp != nil && gp[0] != nil, gp != nil && gp[1] != nil
	if gx[0] == nil && !wantW && !wantB {
		return
	}
	n, c, sz := bnGeometry(gy.Shape)
	b := cuda.BNShape{N: n, C: c, S: sz}
	if s.err == nil && s.d.BNReady(b) != nil {
		// cuDNN was dropped since the forward (a later plan failed): its
		// saved statistics make x̂ and 1/σ for graphpipe's kernels
		xh, rstd := s.Scratch(tensor.Size(x.Shape)), s.doubles(c)
		s.Launch("gp_bn_restore", tensor.Size(x.Shape), s.In(x), s.unstash(st.mean), s.unstash(st.invStd), xh, rstd, n, c, sz)
		bnOwnBack(s, gy, xh, rstd, p, gx, gp)
		return
	}
	var gxb, gw, gb cuda.Buffer
	fresh := false
	if gx[0] != nil {
		gxb, fresh = s.accInto(gx[0])
	}
	if wantW {
		gw = s.pacc(gp[0])
	}
	if wantB {
		gb = s.pacc(gp[1])
	}
	g, xb, w := s.In(gy), s.In(x), s.param(p[0])
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

func gpuSoftmax(k *softmax[float32]) (fwdFn, bwdFn) {
	fwd := func(s *Scope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		y := s.newValue(x[0].Shape...)
		outer, n, inner := span(x[0].Shape, k.axis)
		yb := s.ActScratch(tensor.Size(y.Shape))
		s.Launch("gp_softmax_axis", outer*inner, s.In(x[0]), yb, outer, n, inner)
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *Scope, gy *Value[float32], _, _ []*Value[float32], y *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		outer, n, inner := span(y.Shape, k.axis)
		b := s.acc(gx[0])
		s.Launch("gp_softmax_axis_bwd", outer*inner, s.In(y), s.In(gy), b, outer, n, inner)
		s.back(gx[0], b)
	}
	return fwd, bwd
}
