package stage

import (
	"math"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// The GPU kernels compute every op kind with package cuda: cuBLAS for the
// products, kernels.cu for the rest, behind the CPU kernels' interface:
// forward makes the output, backward adds into the gradients it is given
// and skips those given as nil. Where values live is the scope's business
// (gpu_scope.go): on the device for an Executor after UseDevice, on the host
// (each call uploading what it reads and downloading what it writes) for a
// kernel used alone, as the op tests do.

type (
	fwdFn = func(s *gpuScope, x, p []*Value[float32]) (*Value[float32], any, error)
	bwdFn = func(s *gpuScope, gy *Value[float32], x, p []*Value[float32], y *Value[float32], st any, gx, gp []*Value[float32])
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
	fwd := func(s *gpuScope, x, p []*Value[float32]) (*Value[float32], any, error) {
		in, out := dims(p[0])
		r := rows(x[0].Shape)
		y := s.newValue(append(append([]int(nil), x[0].Shape[:len(x[0].Shape)-1]...), out)...)
		xb, w, yb := s.in(x[0]), s.param(p[0]), s.scratch(tensor.Size(y.Shape))
		s.gemm(cuda.GemmArgs{TransB: !inOut, M: r, N: out, K: in, Alpha: 1, A: xb, B: w, C: yb}) // y[R,out] = x·Wᵀ (x·W)
		if bias {
			s.launch("gp_bias", r*out, yb, s.param(p[1]), r, out)
		}
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, p []*Value[float32], _ *Value[float32], _ any, gx, gp []*Value[float32]) {
		in, out := dims(p[0])
		r := rows(x[0].Shape)
		g := s.in(gy)
		if gx[0] != nil {
			b := s.acc(gx[0])
			s.gemm(cuda.GemmArgs{TransB: inOut, M: r, N: in, K: out, Alpha: 1, Beta: 1, A: g, B: s.param(p[0]), C: b}) // gx += gy·W (gy·Wᵀ)
			s.back(gx[0], b)
		}
		if gp == nil {
			return
		}
		if gp[0] != nil {
			b := s.acc(gp[0])
			if inOut {
				s.gemm(cuda.GemmArgs{TransA: true, M: in, N: out, K: r, Alpha: 1, Beta: 1, A: s.in(x[0]), B: g, C: b}) // gW += xᵀ·gy
			} else {
				s.gemm(cuda.GemmArgs{TransA: true, M: out, N: in, K: r, Alpha: 1, Beta: 1, A: g, B: s.in(x[0]), C: b}) // gW += gyᵀ·x
			}
			s.back(gp[0], b)
		}
		if bias && gp[1] != nil {
			b := s.acc(gp[1])
			s.colSums(g, r, out, b)
			s.back(gp[1], b)
		}
	}
	return fwd, bwd
}

// actKind is gp_act's kind of each activation (kernels.cu).
var actKind = map[dag.Kind]int32{dag.ReLU: 0, dag.GELU: 1, dag.Tanh: 2, dag.Sigmoid: 3}

// gpuAct is an activation (relu, gelu, tanh, sigmoid): gpuPointwise's
// gp_act, with its four-at-a-time kernels (vec4).
func gpuAct(k *pointwise[float32]) (fwdFn, bwdFn) {
	return pointwiseOp("gp_act", true, actKind[k.kind])
}

// gpuPointwise is an op of one input computed element by element: kernel
// name(kind, x, y, extra..., n) forward, name_bwd(kind, x, y, gy, gx,
// extra..., n) adding into gx.
func gpuPointwise(name string, kind int32, extra ...any) (fwdFn, bwdFn) {
	return pointwiseOp(name, false, kind, extra...)
}

// pointwiseOp is gpuPointwise; with vec4, name also has kernels over
// groups of four, name4(kind, x, y, extra..., n/4) and name4_bwd(kind, x,
// y, gy, gx, extra..., n/4, add), taken where the buffers allow
// (cuda.Vec4), and the gradient is written where nothing else has given to
// it yet (accInto).
func pointwiseOp(name string, vec4 bool, kind int32, extra ...any) (fwdFn, bwdFn) {
	args := func(n int, bufs ...any) []any { return append(append(append([]any{kind}, bufs...), extra...), n) }
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		y := s.newValue(x[0].Shape...)
		n := tensor.Size(y.Shape)
		xb, yb := s.in(x[0]), s.scratch(n)
		if vec4 && cuda.Vec4(n, xb, yb) {
			s.launch(name+"4", n/4, args(n/4, xb, yb)...)
		} else {
			s.launch(name, n, args(n, xb, yb)...)
		}
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], y *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		n := tensor.Size(gy.Shape)
		xb, yb, g := s.in(x[0]), s.in(y), s.in(gy)
		var b cuda.Buffer
		fresh := false
		if vec4 {
			b, fresh = s.accInto(gx[0])
		} else {
			b = s.acc(gx[0])
		}
		if vec4 && cuda.Vec4(n, xb, yb, g, b) {
			s.launch(name+"4_bwd", n/4, append(args(n/4, xb, yb, g, b), boolInt(!fresh))...)
		} else {
			s.clearIfFresh(b, fresh)
			s.launch(name+"_bwd", n, args(n, xb, yb, g, b)...)
		}
		s.back(gx[0], b)
	}
	return fwd, bwd
}

type gpuLNStash struct{ mean, rstd stashBuf }

// lnLanes is LANES in kernels.cu: threads that share one row's sums.
const lnLanes = 32

func gpuLayerNorm(k *layerNorm[float32]) (fwdFn, bwdFn) {
	eps := k.eps
	fwd := func(s *gpuScope, x, p []*Value[float32]) (*Value[float32], any, error) {
		d := p[0].Shape[0]
		r := rows(x[0].Shape)
		y := s.newValue(x[0].Shape...)
		yb, mb, rb := s.scratch(tensor.Size(y.Shape)), s.scratch(r), s.scratch(r)
		xb, part := s.in(x[0]), s.scratch(r*lnLanes)
		s.launch("gp_layernorm_part", r*lnLanes, xb, cuda.Buffer{}, part, r, d)
		s.launch("gp_layernorm_fold", r, part, mb, r, d, float32(0), int32(0))
		s.launch("gp_layernorm_part", r*lnLanes, xb, mb, part, r, d)
		s.launch("gp_layernorm_fold", r, part, rb, r, d, eps, int32(1))
		s.launch("gp_layernorm_apply", r*d, xb, s.param(p[0]), s.param(p[1]), mb, rb, yb, r, d)
		s.out(y, yb)
		return y, &gpuLNStash{mean: s.stash(mb, r), rstd: s.stash(rb, r)}, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, p []*Value[float32], _ *Value[float32], st0 any, gx, gp []*Value[float32]) {
		st := st0.(*gpuLNStash)
		d := p[0].Shape[0]
		r := rows(x[0].Shape)
		xb, g, mb, rb := s.in(x[0]), s.in(gy), s.unstash(st.mean), s.unstash(st.rstd)
		if gx[0] != nil {
			b := s.acc(gx[0])
			p1, p2, s1, s2 := s.scratch(r*lnLanes), s.scratch(r*lnLanes), s.scratch(r), s.scratch(r)
			s.launch("gp_layernorm_bwd_x_part", r*lnLanes, xb, s.param(p[0]), mb, rb, g, p1, p2, r, d)
			s.launch("gp_layernorm_fold", r, p1, s1, r, d, float32(0), int32(0))
			s.launch("gp_layernorm_fold", r, p2, s2, r, d, float32(0), int32(0))
			s.launch("gp_layernorm_bwd_x_apply", r*d, xb, s.param(p[0]), mb, rb, g, s1, s2, b, r, d)
			s.back(gx[0], b)
		}
		if gp != nil && (gp[0] != nil || gp[1] != nil) {
			gg, gb := s.grad(gp[0], d), s.grad(gp[1], d)
			if chunk, parts := colParts(r, d); parts > 0 {
				pg, pb := s.scratch(parts*d), s.scratch(parts*d)
				s.launch("gp_layernorm_bwd_p_part", parts*d, xb, mb, rb, g, pg, pb, r, d, chunk, parts)
				s.launch("gp_colsum_fold", d, pg, gg, parts, d)
				s.launch("gp_colsum_fold", d, pb, gb, parts, d)
			}
			s.back(gp[0], gg)
			s.back(gp[1], gb)
		}
	}
	return fwd, bwd
}

// gpuAddOrBroadcast is add's GPU kernel, or in model@2's forms that of
// those (gpuArith).
func gpuAddOrBroadcast(o *opArgs) (fwdFn, bwdFn) {
	if broadcasts(o) {
		return gpuArith(o)
	}
	return gpuAdd()
}

func gpuAdd() (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		y := s.newValue(x[0].Shape...)
		n := tensor.Size(y.Shape)
		if len(x) == 1 {
			s.out(y, s.copyOf(s.in(x[0]), n))
			return y, nil, nil
		}
		yb, a, b := s.scratch(n), s.in(x[0]), s.in(x[1])
		if cuda.Vec4(n, yb, a, b) { // y = x0 + x1, then += each other input in turn
			s.launch("gp_add4", n/4, a, b, yb, n/4)
		} else {
			s.launch("gp_add", n, a, b, yb, n)
		}
		for _, xi := range x[2:] {
			s.addInto(yb, s.in(xi), n)
		}
		s.out(y, yb)
		return y, nil, nil
	}
	// each input's gradient is gy: copied where nothing else has given to
	// it yet, added otherwise
	bwd := func(s *gpuScope, gy *Value[float32], _, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		n := tensor.Size(gy.Shape)
		g := s.in(gy)
		for _, v := range gx {
			if v == nil {
				continue
			}
			b, fresh := s.accInto(v)
			if fresh {
				if s.err == nil {
					s.fail(s.d.Copy(b, g, n))
				}
			} else {
				s.addInto(b, g, n)
			}
			s.back(v, b)
		}
	}
	return fwd, bwd
}

// addInto adds src [n] into dst, four at a time where the buffers allow.
func (s *gpuScope) addInto(dst, src cuda.Buffer, n int) {
	if cuda.Vec4(n, dst, src) {
		s.launch("gp_add4_into", n/4, dst, src, n/4)
		return
	}
	s.launch("gp_add_into", n, dst, src, n)
}

// gpuMulOrBroadcast is mul's GPU kernel, or in model@2's forms that of
// those (gpuArith).
func gpuMulOrBroadcast(o *opArgs) (fwdFn, bwdFn) {
	if broadcasts(o) {
		return gpuArith(o)
	}
	return gpuMul()
}

func gpuMul() (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		y := s.newValue(x[0].Shape...)
		n := tensor.Size(y.Shape)
		yb := s.scratch(n)
		s.launch("gp_mul", n, s.in(x[0]), s.in(x[1]), yb, n)
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		n := tensor.Size(gy.Shape)
		ga, gb := s.gradOrNone(gx[0]), s.gradOrNone(gx[1]) // gp_mul_bwd skips a null gradient
		s.launch("gp_mul_bwd", n, s.in(gy), s.in(x[0]), s.in(x[1]), ga, gb, n)
		s.back(gx[0], ga)
		s.back(gx[1], gb)
	}
	return fwd, bwd
}

func gpuConcat(k *concat[float32]) (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		shape := append([]int(nil), x[0].Shape...)
		shape[k.axis] = 0
		for _, xi := range x {
			shape[k.axis] += xi.Shape[k.axis]
		}
		y := s.newValue(shape...)
		outer, inner := k.split(shape)
		width := shape[k.axis] * inner
		yb := s.scratch(tensor.Size(y.Shape)) // the inputs' slices cover it
		off := 0
		for _, xi := range x {
			w := xi.Shape[k.axis] * inner
			s.launch("gp_copy_block", outer*w, yb, width, off, s.in(xi), w, 0, outer, w, int32(0))
			off += w
		}
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], y *Value[float32], _ any, gx, _ []*Value[float32]) {
		outer, inner := k.split(y.Shape)
		width := y.Shape[k.axis] * inner
		g := s.in(gy)
		off := 0
		for j, xi := range x {
			w := xi.Shape[k.axis] * inner
			if gx[j] != nil {
				b := s.acc(gx[j])
				s.launch("gp_copy_block", outer*w, b, w, 0, g, width, off, outer, w, int32(1))
				s.back(gx[j], b)
			}
			off += w
		}
	}
	return fwd, bwd
}

func gpuMean(k *mean[float32]) (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		shape := append(append([]int(nil), x[0].Shape[:k.axis]...), x[0].Shape[k.axis+1:]...)
		y := s.newValue(shape...)
		outer, l, inner := k.dims(x[0].Shape)
		yb := s.scratch(tensor.Size(y.Shape))
		s.launch("gp_mean", outer*inner, s.in(x[0]), yb, outer, l, inner)
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		outer, l, inner := k.dims(x[0].Shape)
		b := s.acc(gx[0])
		s.launch("gp_mean_bwd", outer*l*inner, s.in(gy), b, outer, l, inner)
		s.back(gx[0], b)
	}
	return fwd, bwd
}

func gpuFlatten() (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n := x[0].Shape[0]
		y := s.newValue(n, tensor.Size(x[0].Shape)/max(n, 1))
		s.out(y, s.copyOf(s.in(x[0]), tensor.Size(y.Shape)))
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], _, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] != nil {
			b := s.acc(gx[0])
			s.launch("gp_add_into", tensor.Size(gy.Shape), b, s.in(gy), tensor.Size(gy.Shape))
			s.back(gx[0], b)
		}
	}
	return fwd, bwd
}

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
	fwd := func(s *gpuScope, x, p []*Value[float32]) (*Value[float32], any, error) {
		if err := checkIndices(op, x[0].Ints, num); err != nil {
			return nil, nil, err
		}
		y := s.newValue(append(append([]int(nil), x[0].Shape...), dim)...)
		n := len(x[0].Ints)
		yb := s.scratch(tensor.Size(y.Shape)) // the indices were checked: every row is written
		s.launch("gp_embedding", n*dim, s.ints(x[0]), s.param(p[0]), yb, n, dim, num, s.d.BadFlag())
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, _, gp []*Value[float32]) {
		if gp == nil || gp[0] == nil {
			return
		}
		n := len(x[0].Ints)
		b := s.acc(gp[0])
		s.launch("gp_embedding_bwd", n*dim, s.ints(x[0]), s.in(gy), b, n, dim, num)
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
	fwd := func(s *gpuScope, x, p []*Value[float32]) (*Value[float32], any, error) {
		if err := checkIndices(op, x[0].Ints, num); err != nil {
			return nil, nil, err
		}
		n, bag := x[0].Shape[0], x[0].Shape[1]
		y := s.newValue(n, dim)
		yb := s.scratch(tensor.Size(y.Shape))
		s.launch("gp_embedding_bag", n*dim, s.ints(x[0]), s.param(p[0]), yb, n, bag, dim, num, m, s.d.BadFlag())
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, _, gp []*Value[float32]) {
		if gp == nil || gp[0] == nil {
			return
		}
		n, bag := x[0].Shape[0], x[0].Shape[1]
		b := s.acc(gp[0])
		s.launch("gp_embedding_bag_bwd", n*bag*dim, s.ints(x[0]), s.in(gy), b, n, bag, dim, num, m)
		s.back(gp[0], b)
	}
	return fwd, bwd
}

func gpuDot() (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n, d, m := x[0].Shape[0], x[0].Shape[1], len(x)
		pairs := m * (m - 1) / 2
		y := s.newValue(n, pairs)
		xs := make([]cuda.Buffer, m)
		for i := range x {
			xs[i] = s.in(x[i])
		}
		yb := s.scratch(tensor.Size(y.Shape)) // the pairs cover it
		p := 0
		for i := 0; i < m; i++ {
			for j := i + 1; j < m; j++ {
				s.launch("gp_dot_pair", n, xs[i], xs[j], yb, n, d, pairs, p)
				p++
			}
		}
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		n, d, m := x[0].Shape[0], x[0].Shape[1], len(x)
		pairs := m * (m - 1) / 2
		g := s.in(gy)
		xs, gs := make([]cuda.Buffer, m), make([]cuda.Buffer, m)
		for i := range x {
			xs[i], gs[i] = s.in(x[i]), s.grad(gx[i], n*d)
		}
		p := 0
		for i := 0; i < m; i++ {
			for j := i + 1; j < m; j++ {
				s.launch("gp_dot_pair_bwd", n*d, g, xs[j], gs[i], n, d, pairs, p)
				s.launch("gp_dot_pair_bwd", n*d, g, xs[i], gs[j], n, d, pairs, p)
				p++
			}
		}
		for i := range x {
			s.back(gx[i], gs[i])
		}
	}
	return fwd, bwd
}

// lossBlock is the terms one thread of gp_sum_blocks sums in order: a loss
// of up to lossBlock terms is summed in the host's order exactly.
const lossBlock = 4096

// lossMean is a loss's value, the mean of its n terms summed in float64
// (gp_sum_blocks, then gp_mean_fold): kept on the device with values there
// (the step reads it: devTrain.keepLoss), else brought to the host.
func lossMean(s *gpuScope, terms cuda.Buffer, n int) *Value[float32] {
	y := s.newValue(1)
	parts := (n + lossBlock - 1) / lossBlock
	pb, yb := s.doubles(max(parts, 1)), s.scratch(1)
	s.launch("gp_sum_blocks", parts, terms, pb, n, lossBlock)
	s.launch("gp_mean_fold", 1, pb, parts, n, yb)
	s.out(y, yb)
	return y
}

func gpuCrossEntropy(k *crossEntropy[float32]) (fwdFn, bwdFn) {
	op := k.op
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n, c := x[0].Shape[0], x[0].Shape[1]
		if err := checkIndices(op, x[1].Ints, c); err != nil {
			return nil, nil, err
		}
		pb, tb := s.scratch(n*c), s.scratch(n) // the labels were checked: every row is written
		s.launch("gp_ce", n, s.in(x[0]), s.ints(x[1]), pb, tb, n, c, s.d.BadFlag())
		return lossMean(s, tb, n), s.stash(pb, n*c), nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], st any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		n, c := x[0].Shape[0], x[0].Shape[1]
		b := s.acc(gx[0])
		s.launch("gp_ce_bwd", n*c, s.unstash(st.(stashBuf)), s.ints(x[1]), s.scalar(gy)/float32(n), b, n, c)
		s.back(gx[0], b)
	}
	return fwd, bwd
}

// gpuElementLoss is a loss averaging per-element terms of (x, t): term
// writes them, grad adds g·∂term/∂x into gx0, and targetGrad adds g·∂term/∂t
// into gx1.
func gpuElementLoss(term, grad string, targetGrad func(s *gpuScope, gt, xb, tb cuda.Buffer, g float32, n int)) (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n := tensor.Size(x[0].Shape)
		tb := s.scratch(n)
		s.launch(term, n, s.in(x[0]), s.in(x[1]), tb, n)
		return lossMean(s, tb, n), nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		n := tensor.Size(x[0].Shape)
		g := s.scalar(gy) / float32(n)
		xb, tb := s.in(x[0]), s.in(x[1])
		if gx[0] != nil {
			b := s.acc(gx[0])
			s.launch(grad, n, xb, tb, g, b, n)
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
	return gpuElementLoss("gp_mse", "gp_mse_bwd", func(s *gpuScope, gt, xb, tb cuda.Buffer, g float32, n int) {
		s.launch("gp_mse_bwd", n, xb, tb, -g, gt, n)
	})
}

// gpuBCE: max(x,0) − x·t + log(1 + e^−|x|); ∂/∂t = −x.
func gpuBCE() (fwdFn, bwdFn) {
	return gpuElementLoss("gp_bce", "gp_bce_bwd", func(s *gpuScope, gt, xb, _ cuda.Buffer, g float32, n int) {
		s.launch("gp_axpy", n, gt, xb, -g, n)
	})
}

type gpuAttnStash struct {
	heads, probs, ctx stashBuf  // q, k, v [3, n, h, s, dh]; probs [n, h, s, s]; ctx [n·s, d]
	gqkv              *stashBuf // kept by an inputs-only backward for the weights' pass
}

// gpuAttention computes what the CPU kernel does: qkv = x·W_inᵀ + b_in
// [n·s, 3d], head j of q, k, v at columns j·dh, d + j·dh, 2d + j·dh; probs
// [n, h, s, s]; ctx [n·s, d]; y = ctx·W_outᵀ + b_out. cuBLAS's strided
// batches take one stride per operand, and the (sample, head) blocks of qkv
// lie at two (a sample's rows, a head's columns), so the projections are
// first split into heads, [3, n, h, s, dh] (gp_heads_split, adding the bias
// on the way): every per-(sample, head) product is then one strided batch
// of n·h GEMMs, forward and backward, and the context is merged back
// (gp_heads_merge) for the output projection. The softmax runs over every
// (sample, head, query) row at once, in coalesced lanes (softmaxLanes). A
// layer runs 4 cuBLAS calls and 6 launches forward, 8 and 9 backward,
// whatever its samples and heads (TestAttentionLaunchesDry). Every buffer
// below is written in full by a GEMM with beta 0 or a kernel: none is
// zeroed first.
func gpuAttention(k *attention[float32]) (fwdFn, bwdFn) { return attentionWith(k, softmaxLanes) }

// softmaxKernels is attention's softmax over rows of length cols, forward
// (y may be x) and backward (gx (+)= scale·y·(gy − Σ gy·y), acc 0 writing
// instead; gx may be gy).
type softmaxKernels struct {
	fwd func(s *gpuScope, x, y cuda.Buffer, rows, cols int, scale float32, causal int32)
	bwd func(s *gpuScope, y, gy, gx cuda.Buffer, rows, cols int, scale float32, acc int32)
}

// softmaxLanes is the softmax a step runs: a row's columns read by lnLanes
// neighbouring threads, folded per row, then applied element by element
// (3 launches each way; kernels.cu's gp_softmax_part and after).
var softmaxLanes = softmaxKernels{
	fwd: func(s *gpuScope, x, y cuda.Buffer, rows, cols int, scale float32, causal int32) {
		mp, sp, m, sum := s.scratch(rows*lnLanes), s.scratch(rows*lnLanes), s.scratch(rows), s.scratch(rows)
		s.launch("gp_softmax_part", rows*lnLanes, x, mp, sp, rows, cols, scale, causal)
		s.launch("gp_softmax_fold", rows, mp, sp, m, sum, rows)
		s.launch("gp_softmax_apply", rows*cols, x, m, sum, y, rows, cols, scale, causal)
	},
	bwd: func(s *gpuScope, y, gy, gx cuda.Buffer, rows, cols int, scale float32, acc int32) {
		part, d := s.scratch(rows*lnLanes), s.scratch(rows)
		s.launch("gp_softmax_bwd_part", rows*lnLanes, y, gy, part, rows, cols)
		s.launch("gp_lanes_fold", rows, part, d, rows)
		s.launch("gp_softmax_bwd_apply", rows*cols, y, gy, d, gx, rows, cols, scale, acc)
	},
}

// softmaxRows is the same a thread per row, each walking its row (one
// launch each way, reads a row apart: uncoalesced): the lanes' oracle in
// the tests and the before of TestAttentionTimesOnGPU.
var softmaxRows = softmaxKernels{
	fwd: func(s *gpuScope, x, y cuda.Buffer, rows, cols int, scale float32, causal int32) {
		s.launch("gp_softmax_rows", rows, x, y, rows, cols, scale, causal)
	},
	bwd: func(s *gpuScope, y, gy, gx cuda.Buffer, rows, cols int, scale float32, acc int32) {
		s.launch("gp_softmax_rows_bwd", rows, y, gy, gx, rows, cols, scale, acc)
	},
}

// attentionWith is gpuAttention with the given softmax kernels.
func attentionWith(k *attention[float32], sm softmaxKernels) (fwdFn, bwdFn) {
	heads := k.heads
	c := int32(0)
	if k.causal {
		c = 1
	}
	type dims struct{ n, sq, d, dh int }
	dimsOf := func(x *Value[float32]) dims {
		return dims{x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[2] / heads}
	}
	fwd := func(s *gpuScope, x, p []*Value[float32]) (*Value[float32], any, error) {
		z := dimsOf(x[0])
		n, sq, d, dh := z.n, z.sq, z.d, z.dh
		nb, blk := n*heads, sq*dh // batches; elements of one (sample, head) block of q, k, v or ctx
		scale := float32(1 / math.Sqrt(float64(dh)))
		nctx, npr := n*sq*d, n*heads*sq*sq
		qkv, hd, pr := s.scratch(3*nctx), s.scratch(3*nctx), s.scratch(npr)
		s.gemm(cuda.GemmArgs{TransB: true, M: n * sq, N: 3 * d, K: d, Alpha: 1, A: s.in(x[0]), B: s.param(p[0]), C: qkv}) // qkv = x·W_inᵀ
		s.launch("gp_heads_split", 3*nctx, qkv, s.param(p[1]), hd, n, sq, heads, dh, 3)                                   // heads = qkv + b_in
		q, kh, v := hd, hd.Offset(nctx), hd.Offset(2*nctx)
		// scores[s,s] = q[s,dh]·kᵀ per (sample, head)
		s.batched(cuda.GemmArgs{TransB: true, M: sq, N: sq, K: dh, Alpha: 1, A: q, B: kh, C: pr}, blk, blk, sq*sq, nb)
		sm.fwd(s, pr, pr, n*heads*sq, sq, scale, c) // every (sample, head, query) row at once
		ctxh, ctx := s.scratch(nctx), s.scratch(nctx)
		// ctx[s,dh] = P[s,s]·v[s,dh] per (sample, head)
		s.batched(cuda.GemmArgs{M: sq, N: dh, K: sq, Alpha: 1, A: pr, B: v, C: ctxh}, sq*sq, blk, blk, nb)
		s.launch("gp_heads_merge", nctx, ctxh, ctx, n, sq, heads, dh, 1)
		y := s.newValue(n, sq, d)
		yb := s.scratch(nctx)
		s.gemm(cuda.GemmArgs{TransB: true, M: n * sq, N: d, K: d, Alpha: 1, A: ctx, B: s.param(p[2]), C: yb}) // y = ctx·W_outᵀ
		s.launch("gp_bias", nctx, yb, s.param(p[3]), n*sq, d)
		s.out(y, yb)
		return y, &gpuAttnStash{heads: s.stash(hd, 3*nctx), probs: s.stash(pr, npr), ctx: s.stash(ctx, nctx)}, nil
	}
	// qkvGrad is the gradient of the stacked q, k, v projections, [n·s, 3d],
	// from gy through the output projection and the softmax.
	qkvGrad := func(s *gpuScope, g cuda.Buffer, p []*Value[float32], st *gpuAttnStash, z dims, scale float32) cuda.Buffer {
		n, sq, d, dh := z.n, z.sq, z.d, z.dh
		nb, blk := n*heads, sq*dh
		nctx, npr := n*sq*d, n*heads*sq*sq
		hd, pr := s.unstash(st.heads), s.unstash(st.probs)
		q, kh, v := hd, hd.Offset(nctx), hd.Offset(2*nctx)
		gctx, gch := s.scratch(nctx), s.scratch(nctx)
		s.gemm(cuda.GemmArgs{M: n * sq, N: d, K: d, Alpha: 1, A: g, B: s.param(p[2]), C: gctx}) // gctx = gy·W_out
		s.launch("gp_heads_split", nctx, gctx, cuda.Buffer{}, gch, n, sq, heads, dh, 1)
		ghd, gP := s.scratch(3*nctx), s.scratch(npr)
		gq, gk, gv := ghd, ghd.Offset(nctx), ghd.Offset(2*nctx)
		// gP[s,s] = gctx[s,dh]·vᵀ; gv[s,dh] = Pᵀ·gctx
		s.batched(cuda.GemmArgs{TransB: true, M: sq, N: sq, K: dh, Alpha: 1, A: gch, B: v, C: gP}, blk, blk, sq*sq, nb)
		s.batched(cuda.GemmArgs{TransA: true, M: sq, N: dh, K: sq, Alpha: 1, A: pr, B: gch, C: gv}, sq*sq, blk, blk, nb)
		// gS = scale · P ⊙ (gP − Σ gP·P), every row at once, in gP's place
		sm.bwd(s, pr, gP, gP, n*heads*sq, sq, scale, int32(0))
		// gq[s,dh] = gS·k; gk[s,dh] = gSᵀ·q
		s.batched(cuda.GemmArgs{M: sq, N: dh, K: sq, Alpha: 1, A: gP, B: kh, C: gq}, sq*sq, blk, blk, nb)
		s.batched(cuda.GemmArgs{TransA: true, M: sq, N: dh, K: sq, Alpha: 1, A: gP, B: q, C: gk}, sq*sq, blk, blk, nb)
		gqkv := s.scratch(3 * nctx)
		s.launch("gp_heads_merge", 3*nctx, ghd, gqkv, n, sq, heads, dh, 3)
		return gqkv
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, p []*Value[float32], _ *Value[float32], st0 any, gx, gp []*Value[float32]) {
		st := st0.(*gpuAttnStash)
		z := dimsOf(x[0])
		n, sq, d, dh := z.n, z.sq, z.d, z.dh
		scale := float32(1 / math.Sqrt(float64(dh)))
		g := s.in(gy)
		if gp != nil {
			if gp[2] != nil {
				b := s.acc(gp[2])
				s.gemm(cuda.GemmArgs{TransA: true, M: d, N: d, K: n * sq, Alpha: 1, Beta: 1, A: g, B: s.unstash(st.ctx), C: b}) // gW_out += gyᵀ·ctx
				s.back(gp[2], b)
			}
			if gp[3] != nil {
				b := s.acc(gp[3])
				s.colSums(g, n*sq, d, b)
				s.back(gp[3], b)
			}
		}
		if gx[0] == nil && (gp == nil || gp[0] == nil && gp[1] == nil) {
			return
		}
		var gqkv cuda.Buffer
		if st.gqkv != nil {
			gqkv = s.unstash(*st.gqkv)
		} else {
			gqkv = qkvGrad(s, g, p, st, z, scale)
		}
		st.gqkv = nil
		if gx[0] != nil {
			b := s.acc(gx[0])
			s.gemm(cuda.GemmArgs{M: n * sq, N: d, K: 3 * d, Alpha: 1, Beta: 1, A: gqkv, B: s.param(p[0]), C: b}) // gx += gqkv·W_in
			s.back(gx[0], b)
			if gp == nil { // the weights' pass follows: keep what it needs
				sb := s.stash(gqkv, n*sq*3*d)
				st.gqkv = &sb
			}
		}
		if gp != nil && gp[0] != nil {
			b := s.acc(gp[0])
			s.gemm(cuda.GemmArgs{TransA: true, M: 3 * d, N: d, K: n * sq, Alpha: 1, Beta: 1, A: gqkv, B: s.in(x[0]), C: b}) // gW_in += gqkvᵀ·x
			s.back(gp[0], b)
		}
		if gp != nil && gp[1] != nil {
			b := s.acc(gp[1])
			s.colSums(gqkv, n*sq, 3*d, b)
			s.back(gp[1], b)
		}
	}
	return fwd, bwd
}
