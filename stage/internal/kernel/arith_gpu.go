package kernel

import (
	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// gpuAddOrBroadcast is add's GPU kernel, or in model@2's forms that of
// those (gpuArith).
func gpuAddOrBroadcast(o *opArgs) (fwdFn, bwdFn) {
	if broadcasts(o) {
		return gpuArith(o)
	}
	return gpuAdd()
}

func gpuAdd() (fwdFn, bwdFn) {
	fwd := func(s *Scope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		y := s.newValue(x[0].Shape...)
		n := tensor.Size(y.Shape)
		if len(x) == 1 {
			s.out(y, s.copyOf(s.In(x[0]), n))
			return y, nil, nil
		}
		yb, a, b := s.ActScratch(n), s.In(x[0]), s.In(x[1])
		if cuda.Vec4(n, yb, a, b) { // y = x0 + x1, then += each other input in turn
			s.Launch("gp_add4", n/4, a, b, yb, n/4)
		} else {
			s.Launch("gp_add", n, a, b, yb, n)
		}
		for _, xi := range x[2:] {
			s.addInto(yb, s.In(xi), n)
		}
		s.out(y, yb)
		return y, nil, nil
	}
	// each input's gradient is gy: copied where nothing else has given to
	// it yet, added otherwise
	bwd := func(s *Scope, gy *Value[float32], _, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		n := tensor.Size(gy.Shape)
		g := s.In(gy)
		for _, v := range gx {
			if v == nil {
				continue
			}
			b, fresh := s.accInto(v)
			if fresh {
				if s.err == nil {
					s.Fail(s.d.Copy(b, g, n))
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
func (s *Scope) addInto(dst, src cuda.Buffer, n int) {
	if cuda.Vec4(n, dst, src) {
		s.Launch("gp_add4_into", n/4, dst, src, n/4)
		return
	}
	s.Launch("gp_add_into", n, dst, src, n)
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
	fwd := func(s *Scope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		y := s.newValue(x[0].Shape...)
		n := tensor.Size(y.Shape)
		yb := s.ActScratch(n)
		s.Launch("gp_mul", n, s.In(x[0]), s.In(x[1]), yb, n)
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *Scope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		n := tensor.Size(gy.Shape)
		ga, gb := s.gradOrNone(gx[0]), s.gradOrNone(gx[1]) // gp_mul_bwd skips a null gradient
		s.Launch("gp_mul_bwd", n, s.In(gy), s.In(x[0]), s.In(x[1]), ga, gb, n)
		s.back(gx[0], ga)
		s.back(gx[1], gb)
	}
	return fwd, bwd
}

// scalarKind is gp_scalar's kind.
func scalarKind(kind dag.Kind, reverse bool) int32 {
	switch {
	case kind == dag.Add:
		return 0
	case kind == dag.Mul:
		return 1
	case kind == dag.Sub && reverse:
		return 3
	case kind == dag.Sub:
		return 2
	case reverse:
		return 5
	}
	return 4
}

// gpuArith is sub's and div's GPU kernel, and add's and mul's in model@2's
// forms: with a scalar operand, or of inputs that broadcast.
func gpuArith(o *opArgs) (fwdFn, bwdFn) {
	if o.op.Attrs.HasScalar {
		return gpuScalar(scalarKernel[float32](o))
	}
	return gpuBroadcast(broadcastKernel[float32](o))
}

func gpuScalar(k *scalarOp[float32]) (fwdFn, bwdFn) {
	return gpuPointwise("gp_scalar", scalarKind(k.kind, k.reverse), float32(k.s))
}

// gpuBroadcast is add, sub, mul or div of inputs whose shapes broadcast:
// the forward applies each input in turn through its strides (as the CPU
// kernel does); the backward forms each input's gradient per output
// element and sums it over the axes that input stretches along.
func gpuBroadcast(k *broadcast[float32]) (fwdFn, bwdFn) {
	dims := func(n int) []int { return append([]int{n}, k.out...) }
	// strides is input j's strides over [n, out...]: its per-sample size, then k.strides[j]
	strides := func(x []*Value[float32], j int) []int {
		return append([]int{SizeOf(x[j].Shape[1:])}, k.strides[j]...)
	}
	ops := map[dag.Kind]int32{dag.Add: 1, dag.Sub: 2, dag.Mul: 3, dag.Div: 4}
	fwd := func(s *Scope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n := x[0].Shape[0]
		y := s.newValue(dims(n)...)
		size := tensor.Size(y.Shape)
		yb := s.ActScratch(size)
		for j, v := range x {
			op := ops[k.kind]
			if j == 0 {
				op = 0
			}
			s.Launch("gp_bcast", size, yb, s.In(v), s.meta(dims(n), strides(x, j)), int32(len(k.out)+1), size, op, float32(0))
		}
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *Scope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		n := gy.Shape[0]
		size, rank := tensor.Size(gy.Shape), len(k.out)+1
		g := s.In(gy)
		for j := range x {
			if gx[j] == nil {
				continue
			}
			c, scale := g, 1.0
			switch {
			case k.kind == dag.Sub && j == 1:
				scale = -1
			case k.kind == dag.Mul || k.kind == dag.Div:
				c = s.ActScratch(size)
				div := int32(0)
				if k.kind == dag.Div {
					div = 1
				}
				s.Launch("gp_bcast_grad", size, g, s.In(x[0]), s.In(x[1]), s.meta(dims(n), strides(x, 0), strides(x, 1)), int32(rank), size, div, int32(j), c)
			}
			red := make([]int, rank) // the axes input j stretches along
			for d, st := range k.strides[j] {
				if st == 0 {
					red[d+1] = 1
				}
			}
			b := s.acc(gx[j])
			s.Launch("gp_reduce", size, c, b, s.meta(dims(n), red), int32(rank), tensor.Size(gx[j].Shape), scale, int32(1))
			s.back(gx[j], b)
		}
	}
	return fwd, bwd
}
