package kernel

import (
	"math"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

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
// (cuda.Vec4), its name_bwd takes add too, and the gradient is written
// where nothing else has given to it yet (accInto).
func pointwiseOp(name string, vec4 bool, kind int32, extra ...any) (fwdFn, bwdFn) {
	args := func(n int, bufs ...any) []any { return append(append(append([]any{kind}, bufs...), extra...), n) }
	fwd := func(s *Scope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		y := s.newValue(x[0].Shape...)
		n := tensor.Size(y.Shape)
		xb, yb := s.In(x[0]), s.ActScratch(n)
		if vec4 && cuda.Vec4(n, xb, yb) {
			s.Launch(name+"4", n/4, args(n/4, xb, yb)...)
		} else {
			s.Launch(name, n, args(n, xb, yb)...)
		}
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *Scope, gy *Value[float32], x, _ []*Value[float32], y *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		n := tensor.Size(gy.Shape)
		xb, yb, g := s.In(x[0]), s.In(y), s.In(gy)
		var b cuda.Buffer
		fresh := false
		if vec4 {
			b, fresh = s.accInto(gx[0])
		} else {
			b = s.acc(gx[0])
		}
		switch {
		case vec4 && cuda.Vec4(n, xb, yb, g, b):
			s.Launch(name+"4_bwd", n/4, append(args(n/4, xb, yb, g, b), BoolInt(!fresh))...)
		case vec4:
			s.Launch(name+"_bwd", n, append(args(n, xb, yb, g, b), BoolInt(!fresh))...)
		default:
			s.Launch(name+"_bwd", n, args(n, xb, yb, g, b)...)
		}
		s.back(gx[0], b)
	}
	return fwd, bwd
}

// unaryKind is gp_unary's kind.
var unaryKind = map[dag.Kind]int32{dag.Exp: 0, dag.Log: 1, dag.Sqrt: 2, dag.Neg: 3, dag.Erf: 4, dag.Pow: 5,
	dag.HardSigmoid: 6, dag.HardSwish: 7}

// gpuUnary is gp_unary: its two constants are pow's exponent, or
// hard_sigmoid's slope and offset.
func gpuUnary(k *unary[float32]) (fwdFn, bwdFn) {
	e, e2 := k.exponent, 0.0
	if k.kind == dag.HardSigmoid {
		e, e2 = k.alpha, k.beta
	}
	return gpuPointwise("gp_unary", unaryKind[k.kind], e, e2)
}

// gpuDropout draws the CPU kernel's mask on the device: the same key,
// sample and element hashes, and dropped ⇔ (h >> 11) < ⌈p·2⁵³⌉, which is
// dropped's (h >> 11)·2⁻⁵³ < p in integers.
func gpuDropout(k *dropout[float32]) (fwdFn, bwdFn) {
	thresh := int(math.Ceil(k.p * (1 << 53)))
	scale := float32(1 / (1 - k.p))
	apply := func(s *Scope, src, dst cuda.Buffer, shape []int, acc int32) {
		n := tensor.Size(shape)
		per := n / max(shape[0], 1)
		key := dropKey(k.ctx.Seed, k.op, k.ctx.Pos.Step)
		s.Launch("gp_dropout", n, src, dst, int(key), k.ctx.Pos.Sample, per, n, thresh, scale, acc)
	}
	fwd := func(s *Scope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		y := s.newValue(x[0].Shape...)
		if k.ctx.Pos.Eval { // evaluation: the input passes through
			s.out(y, s.copyOf(s.In(x[0]), tensor.Size(y.Shape)))
			return y, nil, nil
		}
		yb := s.ActScratch(tensor.Size(y.Shape))
		apply(s, s.In(x[0]), yb, y.Shape, 0)
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *Scope, gy *Value[float32], _, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		b := s.acc(gx[0])
		apply(s, s.In(gy), b, gy.Shape, 1)
		s.back(gx[0], b)
	}
	return fwd, bwd
}
