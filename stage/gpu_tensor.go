package stage

import (
	"math"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// The GPU kernels of model@2's tensor ops: the same computations as
// kernels_tensor.go and kernels_elementwise.go, element for element, with
// the index arithmetic (transpose, slice, pad, broadcasting, reductions)
// done by kernels.cu's strided kernels from a small table of dims and
// strides (meta), uploaded once for an executor on the device.

// meta is the int32 table a strided kernel reads: dims, then each list of
// strides (uploaded once with a device state: table).
func (s *gpuScope) meta(dims []int, strides ...[]int) cuda.Buffer {
	m := make([]int32, 0, len(dims)*(1+len(strides)))
	for _, d := range dims {
		m = append(m, int32(d))
	}
	for _, st := range strides {
		for _, v := range st {
			m = append(m, int32(v))
		}
	}
	return s.table(m)
}

// copyOf is a new device buffer holding b's first n elements.
func (s *gpuScope) copyOf(b cuda.Buffer, n int) cuda.Buffer {
	y := s.scratch(n)
	if s.err == nil {
		s.fail(s.d.Copy(y, b, n))
	}
	return y
}

// addGrad adds src [n] into v's gradient (reshape, flatten: the same
// elements in another shape).
func (s *gpuScope) addGrad(v *Value[float32], src cuda.Buffer, n int) {
	if v == nil {
		return
	}
	b := s.acc(v)
	s.launch("gp_add_into", n, b, src, n)
	s.back(v, b)
}

func gpuReshape(k *reshape[float32]) (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		y := s.newValue(append([]int{x[0].Shape[0]}, k.shape...)...)
		s.out(y, s.copyOf(s.in(x[0]), tensor.Size(y.Shape)))
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], _, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] != nil {
			s.addGrad(gx[0], s.in(gy), tensor.Size(gy.Shape))
		}
	}
	return fwd, bwd
}

// gpuTranspose: y [n, out...] gathers x at the permuted strides; the
// backward scatters gy back (a permutation: one writer per element).
func gpuTranspose(k *transpose[float32]) (fwdFn, bwdFn) {
	table := func(s *gpuScope, n int) (cuda.Buffer, int) {
		dims := append([]int{n}, k.out...)
		return s.meta(dims, append([]int{sizeOf(k.in)}, k.stride...)), len(dims)
	}
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n := x[0].Shape[0]
		y := s.newValue(append([]int{n}, k.out...)...)
		size := tensor.Size(y.Shape)
		m, rank := table(s, n)
		yb := s.scratch(size)
		s.launch("gp_strided", size, s.in(x[0]), yb, m, int32(rank), size, 0, int32(0), int32(0)) // y[o] = x[map(o)]
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], _, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		size := tensor.Size(gy.Shape)
		m, rank := table(s, gy.Shape[0])
		b := s.acc(gx[0])
		s.launch("gp_strided", size, s.in(gy), b, m, int32(rank), size, 0, int32(1), int32(1)) // gx[map(o)] += gy[o]
		s.back(gx[0], b)
	}
	return fwd, bwd
}

func gpuSoftmax(k *softmax[float32]) (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		y := s.newValue(x[0].Shape...)
		outer, n, inner := span(x[0].Shape, k.axis)
		yb := s.scratch(tensor.Size(y.Shape))
		s.launch("gp_softmax_axis", outer*inner, s.in(x[0]), yb, outer, n, inner)
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], _, _ []*Value[float32], y *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		outer, n, inner := span(y.Shape, k.axis)
		b := s.acc(gx[0])
		s.launch("gp_softmax_axis_bwd", outer*inner, s.in(y), s.in(gy), b, outer, n, inner)
		s.back(gx[0], b)
	}
	return fwd, bwd
}

// gpuSlice: y gathers x along the axis from first by step; the backward
// scatters gy back into those elements.
func gpuSlice(k *slice[float32]) (fwdFn, bwdFn) {
	table := func(s *gpuScope, xs []int) (cuda.Buffer, int, int) {
		dims := append([]int(nil), xs...)
		dims[k.axis] = k.n
		st := rowStrides(xs)
		off := k.first * st[k.axis]
		st[k.axis] *= k.step
		return s.meta(dims, st), len(dims), off
	}
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		shape := append([]int(nil), x[0].Shape...)
		shape[k.axis] = k.n
		y := s.newValue(shape...)
		size := tensor.Size(shape)
		m, rank, off := table(s, x[0].Shape)
		yb := s.scratch(size)
		s.launch("gp_strided", size, s.in(x[0]), yb, m, int32(rank), size, off, int32(0), int32(0))
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		size := tensor.Size(gy.Shape)
		m, rank, off := table(s, x[0].Shape)
		b := s.acc(gx[0])
		s.launch("gp_strided", size, s.in(gy), b, m, int32(rank), size, off, int32(1), int32(1))
		s.back(gx[0], b)
	}
	return fwd, bwd
}

// gpuPad: y is filled with the value, then x scattered into its place;
// the backward gathers gy from there.
func gpuPad(k *pad[float32]) (fwdFn, bwdFn) {
	outShape := func(xs []int) []int {
		r := len(xs) - 1
		out := append([]int(nil), xs...)
		for i := 0; i < r; i++ {
			out[i+1] += k.pads[i] + k.pads[r+i]
		}
		return out
	}
	table := func(s *gpuScope, xs []int) (cuda.Buffer, int, int) {
		ost := rowStrides(outShape(xs))
		off := 0
		for i := 0; i < len(xs)-1; i++ {
			off += k.pads[i] * ost[i+1]
		}
		return s.meta(xs, ost), len(xs), off
	}
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		y := s.newValue(outShape(x[0].Shape)...)
		size, nx := tensor.Size(y.Shape), tensor.Size(x[0].Shape)
		m, rank, off := table(s, x[0].Shape)
		yb := s.scratch(size)
		s.launch("gp_fill", size, yb, k.value, size)
		s.launch("gp_strided", nx, s.in(x[0]), yb, m, int32(rank), nx, off, int32(1), int32(0)) // y[off + map(i)] = x[i]
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		nx := tensor.Size(x[0].Shape)
		m, rank, off := table(s, x[0].Shape)
		b := s.acc(gx[0])
		s.launch("gp_strided", nx, s.in(gy), b, m, int32(rank), nx, off, int32(0), int32(1)) // gx[i] += gy[off + map(i)]
		s.back(gx[0], b)
	}
	return fwd, bwd
}

// gpuMatMul: a [n, L..., m, k] · b [n, L..., k, p] as one strided batch
// of GEMMs over (sample, leading index).
func gpuMatMul(k *matmul[float32]) (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		batch, m, kk, p := k.dims(x[0].Shape, x[1].Shape)
		y := s.newValue(append(append([]int(nil), x[0].Shape[:len(x[0].Shape)-1]...), p)...)
		yb := s.scratch(tensor.Size(y.Shape)) // beta 0 (empty when batch is 0)
		if batch > 0 {
			// c[m,p] = a[m,k]·b[k,p] per batch
			s.batched(cuda.GemmArgs{M: m, N: p, K: kk, Alpha: 1, A: s.in(x[0]), B: s.in(x[1]), C: yb}, m*kk, kk*p, m*p, batch)
		}
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		batch, m, kk, p := k.dims(x[0].Shape, x[1].Shape)
		if batch == 0 {
			return
		}
		g := s.in(gy)
		if gx[0] != nil { // ga[m,k] += g[m,p]·bᵀ
			b := s.acc(gx[0])
			s.batched(cuda.GemmArgs{TransB: true, M: m, N: kk, K: p, Alpha: 1, Beta: 1, A: g, B: s.in(x[1]), C: b}, m*p, kk*p, m*kk, batch)
			s.back(gx[0], b)
		}
		if gx[1] != nil { // gb[k,p] += aᵀ·g[m,p]
			b := s.acc(gx[1])
			s.batched(cuda.GemmArgs{TransA: true, M: kk, N: p, K: m, Alpha: 1, Beta: 1, A: s.in(x[0]), B: g, C: b}, m*kk, m*p, kk*p, batch)
			s.back(gx[1], b)
		}
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
		return append([]int{sizeOf(x[j].Shape[1:])}, k.strides[j]...)
	}
	ops := map[dag.Kind]int32{dag.Add: 1, dag.Sub: 2, dag.Mul: 3, dag.Div: 4}
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n := x[0].Shape[0]
		y := s.newValue(dims(n)...)
		size := tensor.Size(y.Shape)
		yb := s.scratch(size)
		for j, v := range x {
			op := ops[k.kind]
			if j == 0 {
				op = 0
			}
			s.launch("gp_bcast", size, yb, s.in(v), s.meta(dims(n), strides(x, j)), int32(len(k.out)+1), size, op, float32(0))
		}
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		n := gy.Shape[0]
		size, rank := tensor.Size(gy.Shape), len(k.out)+1
		g := s.in(gy)
		for j := range x {
			if gx[j] == nil {
				continue
			}
			c, scale := g, 1.0
			switch {
			case k.kind == dag.Sub && j == 1:
				scale = -1
			case k.kind == dag.Mul || k.kind == dag.Div:
				c = s.scratch(size)
				div := int32(0)
				if k.kind == dag.Div {
					div = 1
				}
				s.launch("gp_bcast_grad", size, g, s.in(x[0]), s.in(x[1]), s.meta(dims(n), strides(x, 0), strides(x, 1)), int32(rank), size, div, int32(j), c)
			}
			red := make([]int, rank) // the axes input j stretches along
			for d, st := range k.strides[j] {
				if st == 0 {
					red[d+1] = 1
				}
			}
			b := s.acc(gx[j])
			s.launch("gp_reduce", size, c, b, s.meta(dims(n), red), int32(rank), tensor.Size(gx[j].Shape), scale, int32(1))
			s.back(gx[j], b)
		}
	}
	return fwd, bwd
}

// unaryKind is gp_unary's kind.
var unaryKind = map[dag.Kind]int32{dag.Exp: 0, dag.Log: 1, dag.Sqrt: 2, dag.Neg: 3, dag.Erf: 4, dag.Pow: 5}

func gpuUnary(k *unary[float32]) (fwdFn, bwdFn) {
	return gpuPointwise("gp_unary", unaryKind[k.kind], k.exponent)
}

// gpuReduce sums x [n, in...] over the axes (per-sample indices), scaled
// by 1/count for a mean; the backward spreads gy back at x's strides.
func gpuReduce(k *reduce[float32]) (fwdFn, bwdFn) {
	red := make([]int, len(k.in)+1)
	for _, a := range k.axes {
		red[a+1] = 1
	}
	rank := int32(len(k.in) + 1)
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n := x[0].Shape[0]
		y := s.newValue(append([]int{n}, k.out...)...)
		size := tensor.Size(y.Shape)
		yb := s.scratch(size)
		s.launch("gp_reduce", size, s.in(x[0]), yb, s.meta(append([]int{n}, k.in...), red), rank, size, k.scale(), int32(0))
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		n := x[0].Shape[0]
		size := tensor.Size(x[0].Shape)
		st := append([]int{sizeOf(k.in) / k.count}, k.stride...)
		b := s.acc(gx[0])
		s.launch("gp_bcast", size, b, s.in(gy), s.meta(append([]int{n}, k.in...), st), rank, size, int32(5), float32(k.scale())) // gx += sc·gy[map]
		s.back(gx[0], b)
	}
	return fwd, bwd
}

// gpuDropout draws the CPU kernel's mask on the device: the same key,
// sample and element hashes, and dropped ⇔ (h >> 11) < ⌈p·2⁵³⌉, which is
// dropped's (h >> 11)·2⁻⁵³ < p in integers.
func gpuDropout(k *dropout[float32]) (fwdFn, bwdFn) {
	thresh := int(math.Ceil(k.p * (1 << 53)))
	scale := float32(1 / (1 - k.p))
	apply := func(s *gpuScope, src, dst cuda.Buffer, shape []int, acc int32) {
		n := tensor.Size(shape)
		per := n / max(shape[0], 1)
		key := dropKey(k.ctx.seed, k.op, k.ctx.pos.Step)
		s.launch("gp_dropout", n, src, dst, int(key), k.ctx.pos.Sample, per, n, thresh, scale, acc)
	}
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		y := s.newValue(x[0].Shape...)
		if k.ctx.pos.Eval { // evaluation: the input passes through
			s.out(y, s.copyOf(s.in(x[0]), tensor.Size(y.Shape)))
			return y, nil, nil
		}
		yb := s.scratch(tensor.Size(y.Shape))
		apply(s, s.in(x[0]), yb, y.Shape, 0)
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], _, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		b := s.acc(gx[0])
		apply(s, s.in(gy), b, gy.Shape, 1)
		s.back(gx[0], b)
	}
	return fwd, bwd
}

// gpuParameter tiles the parameter over the micro-batch's rows; its
// gradient is gy's column sums.
func gpuParameter(k *parameter[float32]) (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, _, p []*Value[float32]) (*Value[float32], any, error) {
		n, per := k.ctx.pos.Rows, len(p[0].Data)
		y := s.newValue(append([]int{n}, p[0].Shape...)...)
		yb := s.scratch(n * per)
		s.launch("gp_tile", n*per, s.param(p[0]), yb, per, n*per)
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], _, _ []*Value[float32], _ *Value[float32], _ any, _, gp []*Value[float32]) {
		if gp == nil || gp[0] == nil {
			return
		}
		b := s.acc(gp[0])
		s.colSums(s.in(gy), gy.Shape[0], tensor.Size(gp[0].Shape), b)
		s.back(gp[0], b)
	}
	return fwd, bwd
}

// gpuConstant: a float constant is tiled over the rows on the device; an
// int32 one (indices) stays on the host, where its readers take it.
func gpuConstant(k *constant[float32]) (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, p []*Value[float32]) (*Value[float32], any, error) {
		if k.ints {
			return k.forward(x, p)
		}
		n, per := k.ctx.pos.Rows, sizeOf(k.shape)
		one := make([]float32, per)
		for i := range one {
			one[i] = float32(k.values[min(i, len(k.values)-1)])
		}
		y := s.newValue(append([]int{n}, k.shape...)...)
		yb := s.scratch(n * per)
		s.launch("gp_tile", n*per, s.constant(one), yb, per, n*per)
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(*gpuScope, *Value[float32], []*Value[float32], []*Value[float32], *Value[float32], any, []*Value[float32], []*Value[float32]) {
	}
	return fwd, bwd
}
