package kernel

import (
	"github.com/graphpipe/graphpipe/tensor"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

func gpuConcat(k *concat[float32]) (fwdFn, bwdFn) {
	fwd := func(s *Scope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		shape := append([]int(nil), x[0].Shape...)
		shape[k.axis] = 0
		for _, xi := range x {
			shape[k.axis] += xi.Shape[k.axis]
		}
		y := s.newValue(shape...)
		outer, inner := k.split(shape)
		width := shape[k.axis] * inner
		yb := s.ActScratch(tensor.Size(y.Shape)) // the inputs' slices cover it
		off := 0
		for _, xi := range x {
			w := xi.Shape[k.axis] * inner
			s.Launch("gp_copy_block", outer*w, yb, width, off, s.In(xi), w, 0, outer, w, int32(0))
			off += w
		}
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *Scope, gy *Value[float32], x, _ []*Value[float32], y *Value[float32], _ any, gx, _ []*Value[float32]) {
		outer, inner := k.split(y.Shape)
		width := y.Shape[k.axis] * inner
		g := s.In(gy)
		off := 0
		for j, xi := range x {
			w := xi.Shape[k.axis] * inner
			if gx[j] != nil {
				b := s.acc(gx[j])
				s.Launch("gp_copy_block", outer*w, b, w, 0, g, width, off, outer, w, int32(1))
				s.back(gx[j], b)
			}
			off += w
		}
	}
	return fwd, bwd
}

func gpuFlatten() (fwdFn, bwdFn) {
	fwd := func(s *Scope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n := x[0].Shape[0]
		y := s.newValue(n, tensor.Size(x[0].Shape)/max(n, 1))
		s.out(y, s.copyOf(s.In(x[0]), tensor.Size(y.Shape)))
		return y, nil, nil
	}
	bwd := func(s *Scope, gy *Value[float32], _, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] != nil {
			b := s.acc(gx[0])
			s.Launch("gp_add_into", tensor.Size(gy.Shape), b, s.In(gy), tensor.Size(gy.Shape))
			s.back(gx[0], b)
		}
	}
	return fwd, bwd
}

// The GPU kernels of the shape ops: the same computations as shape.go,
// element for element, with
// the index arithmetic (transpose, slice, pad, broadcasting, reductions)
// done by kernels.cu's strided kernels from a small table of dims and
// strides (meta), uploaded once for an executor on the device.

// meta is the int32 table a strided kernel reads: dims, then each list of
// strides (uploaded once with a device state: table).
func (s *Scope) meta(dims []int, strides ...[]int) cuda.Buffer {
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

// copyOf is a new device buffer holding b's first n elements, of b's
// element type.
func (s *Scope) copyOf(b cuda.Buffer, n int) cuda.Buffer {
	y := s.Scratch(n)
	if b.Half {
		y = s.ActScratch(n)
	}
	if s.err == nil {
		s.Fail(s.d.Copy(y, b, n))
	}
	return y
}

// addGrad adds src [n] into v's gradient (reshape, flatten: the same
// elements in another shape).
func (s *Scope) addGrad(v *Value[float32], src cuda.Buffer, n int) {
	if v == nil {
		return
	}
	b := s.acc(v)
	s.Launch("gp_add_into", n, b, src, n)
	s.back(v, b)
}

func gpuReshape(k *reshape[float32]) (fwdFn, bwdFn) {
	fwd := func(s *Scope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		y := s.newValue(append([]int{x[0].Shape[0]}, k.shape...)...)
		s.out(y, s.copyOf(s.In(x[0]), tensor.Size(y.Shape)))
		return y, nil, nil
	}
	bwd := func(s *Scope, gy *Value[float32], _, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] != nil {
			s.addGrad(gx[0], s.In(gy), tensor.Size(gy.Shape))
		}
	}
	return fwd, bwd
}

// gpuTranspose: y [n, out...] gathers x at the permuted strides; the
// backward scatters gy back (a permutation: one writer per element).
func gpuTranspose(k *transpose[float32]) (fwdFn, bwdFn) {
	table := func(s *Scope, n int) (cuda.Buffer, int) {
		dims := append([]int{n}, k.out...)
		return s.meta(dims, append([]int{SizeOf(k.in)}, k.stride...)), len(dims)
	}
	fwd := func(s *Scope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n := x[0].Shape[0]
		y := s.newValue(append([]int{n}, k.out...)...)
		size := tensor.Size(y.Shape)
		m, rank := table(s, n)
		yb := s.ActScratch(size)
		s.Launch("gp_strided", size, s.In(x[0]), yb, m, int32(rank), size, 0, int32(0), int32(0)) // y[o] = x[map(o)]
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *Scope, gy *Value[float32], _, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		size := tensor.Size(gy.Shape)
		m, rank := table(s, gy.Shape[0])
		b := s.acc(gx[0])
		s.Launch("gp_strided", size, s.In(gy), b, m, int32(rank), size, 0, int32(1), int32(1)) // gx[map(o)] += gy[o]
		s.back(gx[0], b)
	}
	return fwd, bwd
}

// gpuSlice: y gathers x along the axis from first by step; the backward
// scatters gy back into those elements.
func gpuSlice(k *slice[float32]) (fwdFn, bwdFn) {
	table := func(s *Scope, xs []int) (cuda.Buffer, int, int) {
		dims := append([]int(nil), xs...)
		dims[k.axis] = k.n
		st := rowStrides(xs)
		off := k.first * st[k.axis]
		st[k.axis] *= k.step
		return s.meta(dims, st), len(dims), off
	}
	fwd := func(s *Scope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		shape := append([]int(nil), x[0].Shape...)
		shape[k.axis] = k.n
		y := s.newValue(shape...)
		size := tensor.Size(shape)
		m, rank, off := table(s, x[0].Shape)
		yb := s.ActScratch(size)
		s.Launch("gp_strided", size, s.In(x[0]), yb, m, int32(rank), size, off, int32(0), int32(0))
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *Scope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		size := tensor.Size(gy.Shape)
		m, rank, off := table(s, x[0].Shape)
		b := s.acc(gx[0])
		s.Launch("gp_strided", size, s.In(gy), b, m, int32(rank), size, off, int32(1), int32(1))
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
	table := func(s *Scope, xs []int) (cuda.Buffer, int, int) {
		ost := rowStrides(outShape(xs))
		off := 0
		for i := 0; i < len(xs)-1; i++ {
			off += k.pads[i] * ost[i+1]
		}
		return s.meta(xs, ost), len(xs), off
	}
	fwd := func(s *Scope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		y := s.newValue(outShape(x[0].Shape)...)
		size, nx := tensor.Size(y.Shape), tensor.Size(x[0].Shape)
		m, rank, off := table(s, x[0].Shape)
		yb := s.ActScratch(size)
		s.Launch("gp_fill", size, yb, k.value, size)
		s.Launch("gp_strided", nx, s.In(x[0]), yb, m, int32(rank), nx, off, int32(1), int32(0)) // y[off + map(i)] = x[i]
		s.out(y, yb)
		return y, nil, nil
	}
	bwd := func(s *Scope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		nx := tensor.Size(x[0].Shape)
		m, rank, off := table(s, x[0].Shape)
		b := s.acc(gx[0])
		s.Launch("gp_strided", nx, s.In(gy), b, m, int32(rank), nx, off, int32(0), int32(1)) // gx[i] += gy[off + map(i)]
		s.back(gx[0], b)
	}
	return fwd, bwd
}
