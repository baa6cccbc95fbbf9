package stage

import (
	"fmt"
	"math"
	goruntime "runtime"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// The GPU kernels compute every op kind with package cuda: cuBLAS for the
// products, kernels.cu for the rest. They keep the CPU kernels' interface
// and values: each call uploads what it reads, runs on the device and
// downloads what it writes (a backward uploads the gradients it adds into
// and downloads their sums, so "backward accumulates" holds unchanged).
// Optimizer state and the stash stay in host memory; parameters are
// uploaded once per iteration (paramCache). That costs a PCIe round trip
// per op for activations and gradients; keeping those resident on the
// device is the next step and changes nothing above this file.

// gpuScope runs one kernel call: every buffer it takes is freed by done,
// and the first error sticks (later steps do nothing).
type gpuScope struct {
	d      *cuda.Device
	params *paramCache // nil: parameters are uploaded like any value
	bufs   []cuda.Buffer
	err    error
}

// paramCache keeps each parameter's device copy from its first use until
// the executor next starts an iteration (a Forward with no micro-batch in
// flight), the only time the optimizer, a checkpoint load or anything else
// may change parameters.
type paramCache struct {
	d       *cuda.Device
	bufs    map[*Value[float32]]cuda.Buffer
	uploads int // parameter uploads so far
}

func newParamCache(d *cuda.Device) *paramCache {
	return &paramCache{d: d, bufs: map[*Value[float32]]cuda.Buffer{}}
}

// invalidate forgets every copy, returning its memory to the pool.
func (c *paramCache) invalidate() error {
	defer c.d.Exclusive()()
	var first error
	for v, b := range c.bufs {
		if err := c.d.Free(b); err != nil && first == nil {
			first = err
		}
		delete(c.bufs, v)
	}
	return first
}

// param is a parameter's device copy.
func (s *gpuScope) param(v *Value[float32]) cuda.Buffer {
	if s.params == nil {
		return s.up(v.Data)
	}
	if b, ok := s.params.bufs[v]; ok || s.err != nil {
		return b
	}
	b, err := s.d.Upload(v.Data)
	if err != nil {
		s.fail(err)
		return b
	}
	s.params.bufs[v] = b
	s.params.uploads++
	return b
}

func (s *gpuScope) keep(b cuda.Buffer, err error) cuda.Buffer {
	if err != nil {
		s.fail(err)
		return b
	}
	s.bufs = append(s.bufs, b)
	return b
}

func (s *gpuScope) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

func (s *gpuScope) up(v []float32) cuda.Buffer {
	if s.err != nil {
		return cuda.Buffer{}
	}
	return s.keep(s.d.Upload(v))
}

func (s *gpuScope) upInts(v []int32) cuda.Buffer {
	if s.err != nil {
		return cuda.Buffer{}
	}
	return s.keep(s.d.UploadInts(v))
}

func (s *gpuScope) zeros(n int) cuda.Buffer {
	if s.err != nil {
		return cuda.Buffer{}
	}
	return s.keep(s.d.Zeros(n))
}

// grad uploads a gradient to accumulate into, or gives a zero buffer when
// the caller does not want it (v nil).
func (s *gpuScope) grad(v *Value[float32], n int) cuda.Buffer {
	if v == nil {
		return s.zeros(n)
	}
	return s.up(v.Data)
}

func (s *gpuScope) launch(name string, n int, args ...any) {
	if s.err == nil {
		s.fail(s.d.Launch(name, n, args...))
	}
}

func (s *gpuScope) gemm(g cuda.GemmArgs) {
	if s.err == nil {
		s.fail(s.d.Sgemm(g))
	}
}

func (s *gpuScope) batched(g cuda.GemmArgs, sa, sb, sc, count int) {
	if s.err == nil {
		s.fail(s.d.SgemmBatched(g, sa, sb, sc, count))
	}
}

func (s *gpuScope) down(dst []float32, b cuda.Buffer) {
	if s.err == nil {
		s.fail(s.d.Download(dst, b))
	}
}

// back downloads an accumulated gradient into v, when v is wanted.
func (s *gpuScope) back(v *Value[float32], b cuda.Buffer) {
	if v != nil {
		s.down(v.Data, b)
	}
}

func (s *gpuScope) done() error {
	for _, b := range s.bufs {
		if err := s.d.Free(b); err != nil {
			s.fail(err)
		}
	}
	s.bufs = nil
	return s.err
}

// gpuKernel wraps an op's GPU implementation; a device failure in a
// backward, which has no error result, is kept and reported by the
// executor's next call (Executor.deviceErr).
type gpuKernel struct {
	d     *cuda.Device
	cache *paramCache
	errp  *error
	fwd   func(s *gpuScope, x, p []*Value[float32]) (*Value[float32], any, error)
	bwd   func(s *gpuScope, gy *Value[float32], x, p []*Value[float32], y *Value[float32], st any, gx, gp []*Value[float32])
}

// CUDA contexts are current per OS thread and goroutines move between
// threads, so each call pins its goroutine and binds the device first.
func (k *gpuKernel) forward(x, p []*Value[float32]) (*Value[float32], any, error) {
	defer k.d.Exclusive()()
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	s := &gpuScope{d: k.d, params: k.cache}
	s.fail(k.d.Bind())
	y, st, err := k.fwd(s, x, p)
	if derr := s.done(); err == nil && derr != nil {
		err = fmt.Errorf("gpu: %w", derr)
	}
	return y, st, err
}

func (k *gpuKernel) backward(gy *Value[float32], x, p []*Value[float32], y *Value[float32], st any, gx, gp []*Value[float32]) {
	defer k.d.Exclusive()()
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	s := &gpuScope{d: k.d, params: k.cache}
	s.fail(k.d.Bind())
	k.bwd(s, gy, x, p, y, st, gx, gp)
	if err := s.done(); err != nil && *k.errp == nil {
		*k.errp = fmt.Errorf("gpu: %w", err)
	}
}

// newGPUKernel builds the GPU kernel of op i of g; errp collects device
// errors from backward passes; cache, when not nil, keeps parameters on
// the device between calls.
func newGPUKernel(g *dag.Graph, i int, d *cuda.Device, cache *paramCache, errp *error) (kernel[float32], error) {
	op := g.Op(i)
	a := op.Attrs
	in := g.OpInputs(i)
	k := &gpuKernel{d: d, cache: cache, errp: errp}
	switch op.Kind {
	case dag.Linear:
		k.fwd, k.bwd = gpuLinear(a.Bias)
	case dag.ReLU, dag.GELU, dag.Tanh, dag.Sigmoid:
		k.fwd, k.bwd = gpuAct(map[dag.Kind]int32{dag.ReLU: 0, dag.GELU: 1, dag.Tanh: 2, dag.Sigmoid: 3}[op.Kind])
	case dag.LayerNorm:
		k.fwd, k.bwd = gpuLayerNorm(float32(a.Eps))
	case dag.Add:
		k.fwd, k.bwd = gpuAdd()
	case dag.Mul:
		k.fwd, k.bwd = gpuMul()
	case dag.Concat:
		k.fwd, k.bwd = gpuConcat(&concat[float32]{axis: axis(a.Axis, len(in[0].Shape))})
	case dag.Mean:
		k.fwd, k.bwd = gpuMean(&mean[float32]{axis: axis(a.Axis, len(in[0].Shape))})
	case dag.Flatten:
		k.fwd, k.bwd = gpuFlatten()
	case dag.Embedding:
		k.fwd, k.bwd = gpuEmbedding(op.Name, int(a.Num), int(a.Dim))
	case dag.EmbeddingBag:
		k.fwd, k.bwd = gpuEmbeddingBag(op.Name, int(a.Num), int(a.Dim), a.Mode == "mean")
	case dag.Attention:
		k.fwd, k.bwd = gpuAttention(int(a.Heads), a.Causal)
	case dag.DotInteraction:
		k.fwd, k.bwd = gpuDot()
	case dag.SoftmaxCrossEntropy:
		k.fwd, k.bwd = gpuCrossEntropy(op.Name)
	case dag.MSE:
		k.fwd, k.bwd = gpuMSE()
	case dag.BCEWithLogits:
		k.fwd, k.bwd = gpuBCE()
	default:
		return newKernel[float32](g, i) // opaque and unknown kinds fail as on the CPU
	}
	return k, nil
}

type (
	fwdFn = func(s *gpuScope, x, p []*Value[float32]) (*Value[float32], any, error)
	bwdFn = func(s *gpuScope, gy *Value[float32], x, p []*Value[float32], y *Value[float32], st any, gx, gp []*Value[float32])
)

func gpuLinear(bias bool) (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, p []*Value[float32]) (*Value[float32], any, error) {
		in, out := p[0].Shape[1], p[0].Shape[0]
		r := rows(x[0].Shape)
		y := NewValue[float32](append(append([]int(nil), x[0].Shape[:len(x[0].Shape)-1]...), out)...)
		xb, w, yb := s.up(x[0].Data), s.param(p[0]), s.zeros(len(y.Data))
		s.gemm(cuda.GemmArgs{TransB: true, M: r, N: out, K: in, Alpha: 1, A: xb, B: w, C: yb}) // y[R,out] = x·Wᵀ
		if bias {
			s.launch("gp_bias", r*out, yb, s.param(p[1]), r, out)
		}
		s.down(y.Data, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, p []*Value[float32], _ *Value[float32], _ any, gx, gp []*Value[float32]) {
		in, out := p[0].Shape[1], p[0].Shape[0]
		r := rows(x[0].Shape)
		g := s.up(gy.Data)
		if gx[0] != nil {
			b := s.up(gx[0].Data)
			s.gemm(cuda.GemmArgs{M: r, N: in, K: out, Alpha: 1, Beta: 1, A: g, B: s.param(p[0]), C: b}) // gx += gy·W
			s.back(gx[0], b)
		}
		if gp == nil {
			return
		}
		if gp[0] != nil {
			b := s.up(gp[0].Data)
			s.gemm(cuda.GemmArgs{TransA: true, M: out, N: in, K: r, Alpha: 1, Beta: 1, A: g, B: s.up(x[0].Data), C: b}) // gW += gyᵀ·x
			s.back(gp[0], b)
		}
		if bias && gp[1] != nil {
			b := s.up(gp[1].Data)
			s.launch("gp_bias_bwd", out, g, b, r, out)
			s.back(gp[1], b)
		}
	}
	return fwd, bwd
}

func gpuAct(kind int32) (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		y := NewValue[float32](x[0].Shape...)
		n := len(y.Data)
		yb := s.zeros(n)
		s.launch("gp_act", n, kind, s.up(x[0].Data), yb, n)
		s.down(y.Data, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], y *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		n := len(gy.Data)
		b := s.up(gx[0].Data)
		s.launch("gp_act_bwd", n, kind, s.up(x[0].Data), s.up(y.Data), s.up(gy.Data), b, n)
		s.back(gx[0], b)
	}
	return fwd, bwd
}

type gpuLNStash struct{ mean, rstd []float32 }

func gpuLayerNorm(eps float32) (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, p []*Value[float32]) (*Value[float32], any, error) {
		d := p[0].Shape[0]
		r := rows(x[0].Shape)
		y := NewValue[float32](x[0].Shape...)
		st := &gpuLNStash{mean: make([]float32, r), rstd: make([]float32, r)}
		yb, mb, rb := s.zeros(len(y.Data)), s.zeros(r), s.zeros(r)
		s.launch("gp_layernorm", r, s.up(x[0].Data), s.param(p[0]), s.param(p[1]), yb, mb, rb, r, d, eps)
		s.down(y.Data, yb)
		s.down(st.mean, mb)
		s.down(st.rstd, rb)
		return y, st, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, p []*Value[float32], _ *Value[float32], st0 any, gx, gp []*Value[float32]) {
		st := st0.(*gpuLNStash)
		d := p[0].Shape[0]
		r := rows(x[0].Shape)
		xb, g, mb, rb := s.up(x[0].Data), s.up(gy.Data), s.up(st.mean), s.up(st.rstd)
		if gx[0] != nil {
			b := s.up(gx[0].Data)
			s.launch("gp_layernorm_bwd_x", r, xb, s.param(p[0]), mb, rb, g, b, r, d)
			s.back(gx[0], b)
		}
		if gp != nil && (gp[0] != nil || gp[1] != nil) {
			gg, gb := s.grad(gp[0], d), s.grad(gp[1], d)
			s.launch("gp_layernorm_bwd_p", d, xb, mb, rb, g, gg, gb, r, d)
			s.back(gp[0], gg)
			s.back(gp[1], gb)
		}
	}
	return fwd, bwd
}

func gpuAdd() (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		y := NewValue[float32](x[0].Shape...)
		n := len(y.Data)
		yb := s.zeros(n)
		for _, xi := range x {
			s.launch("gp_add_into", n, yb, s.up(xi.Data), n)
		}
		s.down(y.Data, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], _, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		n := len(gy.Data)
		g := s.up(gy.Data)
		for _, v := range gx {
			if v != nil {
				b := s.up(v.Data)
				s.launch("gp_add_into", n, b, g, n)
				s.back(v, b)
			}
		}
	}
	return fwd, bwd
}

func gpuMul() (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		y := NewValue[float32](x[0].Shape...)
		n := len(y.Data)
		yb := s.zeros(n)
		s.launch("gp_mul", n, s.up(x[0].Data), s.up(x[1].Data), yb, n)
		s.down(y.Data, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		n := len(gy.Data)
		ga, gb := s.grad(gx[0], n), s.grad(gx[1], n)
		s.launch("gp_mul_bwd", n, s.up(gy.Data), s.up(x[0].Data), s.up(x[1].Data), ga, gb, n)
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
		y := NewValue[float32](shape...)
		outer, inner := k.split(shape)
		width := shape[k.axis] * inner
		yb := s.zeros(len(y.Data))
		off := 0
		for _, xi := range x {
			w := xi.Shape[k.axis] * inner
			s.launch("gp_copy_block", outer*w, yb, width, off, s.up(xi.Data), w, 0, outer, w, int32(0))
			off += w
		}
		s.down(y.Data, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], y *Value[float32], _ any, gx, _ []*Value[float32]) {
		outer, inner := k.split(y.Shape)
		width := y.Shape[k.axis] * inner
		g := s.up(gy.Data)
		off := 0
		for j, xi := range x {
			w := xi.Shape[k.axis] * inner
			if gx[j] != nil {
				b := s.up(gx[j].Data)
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
		y := NewValue[float32](shape...)
		outer, l, inner := k.dims(x[0].Shape)
		yb := s.zeros(len(y.Data))
		s.launch("gp_mean", outer*inner, s.up(x[0].Data), yb, outer, l, inner)
		s.down(y.Data, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		outer, l, inner := k.dims(x[0].Shape)
		b := s.up(gx[0].Data)
		s.launch("gp_mean_bwd", outer*l*inner, s.up(gy.Data), b, outer, l, inner)
		s.back(gx[0], b)
	}
	return fwd, bwd
}

func gpuFlatten() (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n := x[0].Shape[0]
		y := NewValue[float32](n, len(x[0].Data)/max(n, 1))
		yb := s.zeros(len(y.Data))
		s.launch("gp_add_into", len(y.Data), yb, s.up(x[0].Data), len(y.Data))
		s.down(y.Data, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], _, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		if gx[0] != nil {
			b := s.up(gx[0].Data)
			s.launch("gp_add_into", len(gy.Data), b, s.up(gy.Data), len(gy.Data))
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

func gpuEmbedding(op string, num, dim int) (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, p []*Value[float32]) (*Value[float32], any, error) {
		if err := checkIndices(op, x[0].Ints, num); err != nil {
			return nil, nil, err
		}
		y := NewValue[float32](append(append([]int(nil), x[0].Shape...), dim)...)
		n := len(x[0].Ints)
		yb := s.zeros(len(y.Data))
		s.launch("gp_embedding", n*dim, s.upInts(x[0].Ints), s.param(p[0]), yb, n, dim, num, s.d.BadFlag())
		s.down(y.Data, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, _, gp []*Value[float32]) {
		if gp == nil || gp[0] == nil {
			return
		}
		n := len(x[0].Ints)
		b := s.up(gp[0].Data)
		s.launch("gp_embedding_bwd", n*dim, s.upInts(x[0].Ints), s.up(gy.Data), b, n, dim, num)
		s.back(gp[0], b)
	}
	return fwd, bwd
}

func gpuEmbeddingBag(op string, num, dim int, isMean bool) (fwdFn, bwdFn) {
	m := int32(0)
	if isMean {
		m = 1
	}
	fwd := func(s *gpuScope, x, p []*Value[float32]) (*Value[float32], any, error) {
		if err := checkIndices(op, x[0].Ints, num); err != nil {
			return nil, nil, err
		}
		n, bag := x[0].Shape[0], x[0].Shape[1]
		y := NewValue[float32](n, dim)
		yb := s.zeros(len(y.Data))
		s.launch("gp_embedding_bag", n*dim, s.upInts(x[0].Ints), s.param(p[0]), yb, n, bag, dim, num, m, s.d.BadFlag())
		s.down(y.Data, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, _, gp []*Value[float32]) {
		if gp == nil || gp[0] == nil {
			return
		}
		n, bag := x[0].Shape[0], x[0].Shape[1]
		b := s.up(gp[0].Data)
		s.launch("gp_embedding_bag_bwd", n*bag*dim, s.upInts(x[0].Ints), s.up(gy.Data), b, n, bag, dim, num, m)
		s.back(gp[0], b)
	}
	return fwd, bwd
}

func gpuDot() (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n, d, m := x[0].Shape[0], x[0].Shape[1], len(x)
		pairs := m * (m - 1) / 2
		y := NewValue[float32](n, pairs)
		xs := make([]cuda.Buffer, m)
		for i := range x {
			xs[i] = s.up(x[i].Data)
		}
		yb := s.zeros(len(y.Data))
		p := 0
		for i := 0; i < m; i++ {
			for j := i + 1; j < m; j++ {
				s.launch("gp_dot_pair", n, xs[i], xs[j], yb, n, d, pairs, p)
				p++
			}
		}
		s.down(y.Data, yb)
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		n, d, m := x[0].Shape[0], x[0].Shape[1], len(x)
		pairs := m * (m - 1) / 2
		g := s.up(gy.Data)
		xs, gs := make([]cuda.Buffer, m), make([]cuda.Buffer, m)
		for i := range x {
			xs[i], gs[i] = s.up(x[i].Data), s.grad(gx[i], n*d)
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

// sumTerms sums a loss's per-element terms in float64, as the CPU does.
func sumTerms(s *gpuScope, b cuda.Buffer, n int) float64 {
	terms := make([]float32, n)
	s.down(terms, b)
	var sum float64
	for _, t := range terms {
		sum += float64(t)
	}
	return sum
}

func gpuCrossEntropy(op string) (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n, c := x[0].Shape[0], x[0].Shape[1]
		if err := checkIndices(op, x[1].Ints, c); err != nil {
			return nil, nil, err
		}
		probs := make([]float32, n*c)
		pb, tb := s.zeros(n*c), s.zeros(n)
		s.launch("gp_ce", n, s.up(x[0].Data), s.upInts(x[1].Ints), pb, tb, n, c, s.d.BadFlag())
		y := NewValue[float32](1)
		y.Data[0] = float32(sumTerms(s, tb, n) / float64(n))
		s.down(probs, pb)
		return y, probs, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], st any, gx, _ []*Value[float32]) {
		if gx[0] == nil {
			return
		}
		n, c := x[0].Shape[0], x[0].Shape[1]
		b := s.up(gx[0].Data)
		s.launch("gp_ce_bwd", n*c, s.up(st.([]float32)), s.upInts(x[1].Ints), gy.Data[0]/float32(n), b, n, c)
		s.back(gx[0], b)
	}
	return fwd, bwd
}

// gpuElementLoss is a loss averaging per-element terms of (x, t): term
// writes them, grad adds g·∂term/∂x into gx0, and targetGrad adds g·∂term/∂t
// into gx1.
func gpuElementLoss(term, grad string, targetGrad func(s *gpuScope, gt, xb, tb cuda.Buffer, g float32, n int)) (fwdFn, bwdFn) {
	fwd := func(s *gpuScope, x, _ []*Value[float32]) (*Value[float32], any, error) {
		n := len(x[0].Data)
		tb := s.zeros(n)
		s.launch(term, n, s.up(x[0].Data), s.up(x[1].Data), tb, n)
		y := NewValue[float32](1)
		y.Data[0] = float32(sumTerms(s, tb, n) / float64(n))
		return y, nil, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, _ []*Value[float32], _ *Value[float32], _ any, gx, _ []*Value[float32]) {
		n := len(x[0].Data)
		g := gy.Data[0] / float32(n)
		xb, tb := s.up(x[0].Data), s.up(x[1].Data)
		if gx[0] != nil {
			b := s.up(gx[0].Data)
			s.launch(grad, n, xb, tb, g, b, n)
			s.back(gx[0], b)
		}
		if gx[1] != nil {
			b := s.up(gx[1].Data)
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

type gpuAttnStash struct{ qkv, probs, ctx []float32 }

// gpuAttention follows the CPU kernel's layout: qkv [n·s, 3d], head h of
// q, k, v at columns h·dh, d + h·dh, 2d + h·dh; probs [n, h, s, s]; the
// heads of one sample run as one strided batch of GEMMs.
func gpuAttention(heads int, causal bool) (fwdFn, bwdFn) {
	c := int32(0)
	if causal {
		c = 1
	}
	type dims struct{ n, sq, d, dh int }
	dimsOf := func(x *Value[float32]) dims {
		return dims{x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[2] / heads}
	}
	fwd := func(s *gpuScope, x, p []*Value[float32]) (*Value[float32], any, error) {
		z := dimsOf(x[0])
		n, sq, d, dh := z.n, z.sq, z.d, z.dh
		scale := float32(1 / math.Sqrt(float64(dh)))
		st := &gpuAttnStash{qkv: make([]float32, n*sq*3*d), probs: make([]float32, n*heads*sq*sq), ctx: make([]float32, n*sq*d)}
		qkv, pr, ctx := s.zeros(len(st.qkv)), s.zeros(len(st.probs)), s.zeros(len(st.ctx))
		s.gemm(cuda.GemmArgs{TransB: true, M: n * sq, N: 3 * d, K: d, Alpha: 1, A: s.up(x[0].Data), B: s.param(p[0]), C: qkv}) // qkv = x·W_inᵀ
		s.launch("gp_bias", n*sq*3*d, qkv, s.param(p[1]), n*sq, 3*d)
		for b := 0; b < n; b++ {
			base := b * sq * 3 * d
			q, k, v := qkv.Offset(base), qkv.Offset(base+d), qkv.Offset(base+2*d)
			pb := pr.Offset(b * heads * sq * sq)
			// scores[s,s] = q[s,dh]·kᵀ per head
			s.batched(cuda.GemmArgs{TransB: true, M: sq, N: sq, K: dh, Alpha: 1, A: q, B: k, C: pb, LDA: 3 * d, LDB: 3 * d, LDC: sq}, dh, dh, sq*sq, heads)
			s.launch("gp_softmax", heads*sq, pb, pb, heads*sq, sq, scale, c)
			// ctx[s,dh] = P[s,s]·v[s,dh] per head
			s.batched(cuda.GemmArgs{M: sq, N: dh, K: sq, Alpha: 1, A: pb, B: v, C: ctx.Offset(b * sq * d), LDA: sq, LDB: 3 * d, LDC: d}, sq*sq, dh, dh, heads)
		}
		y := NewValue[float32](n, sq, d)
		yb := s.zeros(len(y.Data))
		s.gemm(cuda.GemmArgs{TransB: true, M: n * sq, N: d, K: d, Alpha: 1, A: ctx, B: s.param(p[2]), C: yb}) // y = ctx·W_outᵀ
		s.launch("gp_bias", n*sq*d, yb, s.param(p[3]), n*sq, d)
		s.down(y.Data, yb)
		s.down(st.qkv, qkv)
		s.down(st.probs, pr)
		s.down(st.ctx, ctx)
		return y, st, nil
	}
	bwd := func(s *gpuScope, gy *Value[float32], x, p []*Value[float32], _ *Value[float32], st0 any, gx, gp []*Value[float32]) {
		st := st0.(*gpuAttnStash)
		z := dimsOf(x[0])
		n, sq, d, dh := z.n, z.sq, z.d, z.dh
		scale := float32(1 / math.Sqrt(float64(dh)))
		g := s.up(gy.Data)
		if gp != nil {
			if gp[2] != nil {
				b := s.up(gp[2].Data)
				s.gemm(cuda.GemmArgs{TransA: true, M: d, N: d, K: n * sq, Alpha: 1, Beta: 1, A: g, B: s.up(st.ctx), C: b}) // gW_out += gyᵀ·ctx
				s.back(gp[2], b)
			}
			if gp[3] != nil {
				b := s.up(gp[3].Data)
				s.launch("gp_bias_bwd", d, g, b, n*sq, d)
				s.back(gp[3], b)
			}
		}
		if gx[0] == nil && (gp == nil || gp[0] == nil && gp[1] == nil) {
			return
		}
		gctx := s.zeros(n * sq * d)
		s.gemm(cuda.GemmArgs{M: n * sq, N: d, K: d, Alpha: 1, A: g, B: s.param(p[2]), C: gctx}) // gctx = gy·W_out
		qkv, pr := s.up(st.qkv), s.up(st.probs)
		gqkv, gP, gS := s.zeros(n*sq*3*d), s.zeros(n*heads*sq*sq), s.zeros(n*heads*sq*sq)
		for b := 0; b < n; b++ {
			base := b * sq * 3 * d
			q, k, v := qkv.Offset(base), qkv.Offset(base+d), qkv.Offset(base+2*d)
			gq, gk, gv := gqkv.Offset(base), gqkv.Offset(base+d), gqkv.Offset(base+2*d)
			pb, gpb, gsb := pr.Offset(b*heads*sq*sq), gP.Offset(b*heads*sq*sq), gS.Offset(b*heads*sq*sq)
			gc := gctx.Offset(b * sq * d)
			// gP[s,s] = gctx[s,dh]·vᵀ
			s.batched(cuda.GemmArgs{TransB: true, M: sq, N: sq, K: dh, Alpha: 1, A: gc, B: v, C: gpb, LDA: d, LDB: 3 * d, LDC: sq}, dh, dh, sq*sq, heads)
			// gv[s,dh] += Pᵀ·gctx
			s.batched(cuda.GemmArgs{TransA: true, M: sq, N: dh, K: sq, Alpha: 1, Beta: 1, A: pb, B: gc, C: gv, LDA: sq, LDB: d, LDC: 3 * d}, sq*sq, dh, dh, heads)
			// gS = scale · P ⊙ (gP − Σ gP·P)
			s.launch("gp_softmax_bwd", heads*sq, pb, gpb, gsb, heads*sq, sq, scale)
			// gq[s,dh] += gS·k; gk[s,dh] += gSᵀ·q
			s.batched(cuda.GemmArgs{M: sq, N: dh, K: sq, Alpha: 1, Beta: 1, A: gsb, B: k, C: gq, LDA: sq, LDB: 3 * d, LDC: 3 * d}, sq*sq, dh, dh, heads)
			s.batched(cuda.GemmArgs{TransA: true, M: sq, N: dh, K: sq, Alpha: 1, Beta: 1, A: gsb, B: q, C: gk, LDA: sq, LDB: 3 * d, LDC: 3 * d}, sq*sq, dh, dh, heads)
		}
		if gx[0] != nil {
			b := s.up(gx[0].Data)
			s.gemm(cuda.GemmArgs{M: n * sq, N: d, K: 3 * d, Alpha: 1, Beta: 1, A: gqkv, B: s.param(p[0]), C: b}) // gx += gqkv·W_in
			s.back(gx[0], b)
		}
		if gp != nil && gp[0] != nil {
			b := s.up(gp[0].Data)
			s.gemm(cuda.GemmArgs{TransA: true, M: 3 * d, N: d, K: n * sq, Alpha: 1, Beta: 1, A: gqkv, B: s.up(x[0].Data), C: b}) // gW_in += gqkvᵀ·x
			s.back(gp[0], b)
		}
		if gp != nil && gp[1] != nil {
			b := s.up(gp[1].Data)
			s.launch("gp_bias_bwd", 3*d, gqkv, b, n*sq, 3*d)
			s.back(gp[1], b)
		}
	}
	return fwd, bwd
}

// UseDevice moves every op of the stage onto d: its forward and backward
// passes then run there (see the top of this file for what stays on the
// host). Call it before the first Forward.
func (e *Executor) UseDevice(d *cuda.Device) error {
	if len(e.mbs) > 0 {
		return fmt.Errorf("stage: UseDevice with %d micro-batches in flight", len(e.mbs))
	}
	e.pcache = newParamCache(d)
	for _, i := range e.ops {
		k, err := newGPUKernel(e.g, i, d, e.pcache, &e.devErr)
		if err != nil {
			return err
		}
		e.kernels[i] = k
	}
	return nil
}
