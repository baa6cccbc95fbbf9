package stage

import (
	"fmt"
	goruntime "runtime"
	"unsafe"

	"github.com/graphpipe/graphpipe/tensor"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// gpuScope runs one GPU kernel call. Its temporaries are freed by done; the
// first error sticks (later steps do nothing). With a device state (an
// Executor on the CUDA backend) values stay on the device: inputs are read from
// their device copies, outputs and gradients are kept there, and only what
// crosses the stage's boundary is copied (gpu_exec.go). Without one (dev
// nil: the op tests) every call uploads what it reads and downloads what it
// writes, so the host values are always current.
type gpuScope struct {
	d    *cuda.Device
	dev  *devState
	opts scopeOpts
	bufs []cuda.Buffer
	err  error
}

// scopeOpts are what a test asks of a kernel used alone (without a device
// state, whose precision the kernels otherwise follow): products in TF32,
// and conv2d's im2col path where cuDNN is loaded.
type scopeOpts struct {
	tf32   bool
	im2col bool
}

// tf32 says whether the scope's products (GEMMs, cuDNN's convolutions)
// run in TF32: the device state's precision, or the test's.
func (s *gpuScope) tf32() bool { return s.dev != nil && s.dev.tf32 || s.opts.tf32 }

// bf16 says whether the scope's GEMMs round their operands to bf16.
func (s *gpuScope) bf16() bool { return s.dev != nil && s.dev.bf16 }

func (s *gpuScope) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

func (s *gpuScope) keep(b cuda.Buffer, err error) cuda.Buffer {
	if err != nil {
		s.fail(err)
		return b
	}
	s.bufs = append(s.bufs, b)
	return b
}

// own takes b out of the scope's temporaries: whoever registered it frees it.
func (s *gpuScope) own(b cuda.Buffer) {
	for i, t := range s.bufs {
		if t == b {
			s.bufs = append(s.bufs[:i], s.bufs[i+1:]...)
			return
		}
	}
}

// scratch is n elements of uninitialised device memory (NaN on the
// emulator), freed with the scope unless out or stash takes it: a
// temporary, or an output that a kernel or a GEMM with beta 0 writes in
// full. What is added into takes zeros, which costs a memset.
func (s *gpuScope) scratch(n int) cuda.Buffer {
	if s.err != nil {
		return cuda.Buffer{}
	}
	return s.keep(s.d.Alloc(n))
}

// colParts cuts rows into chunks for the two-pass column sums
// (gp_colsum_part): enough (chunk, column) threads to fill a GPU, each
// summing a run of rows. It returns the chunk length and count.
func colParts(rows, cols int) (chunk, parts int) {
	parts = min(max((1<<16)/max(cols, 1), 1), max(rows, 1))
	chunk = (rows + parts - 1) / parts
	if chunk == 0 {
		return 1, 0
	}
	return chunk, (rows + chunk - 1) / chunk
}

// colSums adds the column sums of m [rows, cols] into dst [cols].
func (s *gpuScope) colSums(m cuda.Buffer, rows, cols int, dst cuda.Buffer) {
	chunk, parts := colParts(rows, cols)
	if parts == 0 {
		return
	}
	part := s.scratch(parts * cols)
	s.launch("gp_colsum_part", parts*cols, m, part, rows, cols, chunk, parts)
	s.launch("gp_colsum_fold", cols, part, dst, parts, cols)
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

func (s *gpuScope) down(dst []float32, b cuda.Buffer) {
	if s.err == nil {
		s.fail(s.d.Download(dst, b))
	}
}

// resident is the micro-batch's table of device copies, or nil.
func (s *gpuScope) resident() *residency {
	if s.dev == nil {
		return nil
	}
	return s.dev.cur
}

// newValue is an op's output: with host storage, or shape only when it
// will live on the device.
func (s *gpuScope) newValue(shape ...int) *Value[float32] {
	if s.resident() != nil {
		return &Value[float32]{Shape: append([]int(nil), shape...)}
	}
	return NewValue[float32](shape...)
}

// in is a value an op reads: its device copy, or an upload of its host
// data. With values on the device the upload goes through pinned staging
// without a wait and is kept for the micro-batch (values are never
// changed once made): a micro-batch's feeds cross once.
func (s *gpuScope) in(v *Value[float32]) cuda.Buffer {
	r := s.resident()
	if r != nil {
		if b, ok := r.vals[v]; ok {
			return b
		}
	}
	if v.Data == nil && tensor.Size(v.Shape) > 0 {
		s.fail(fmt.Errorf("a value of shape %v has neither host data nor a device copy", v.Shape))
		return cuda.Buffer{}
	}
	if r == nil {
		return s.up(v.Data)
	}
	if s.err != nil {
		return cuda.Buffer{}
	}
	b, err := s.d.UploadAsync(v.Data)
	if err != nil {
		s.fail(err)
		return b
	}
	r.hold(v, b)
	return b
}

// ints is an int32 value's device copy (indices, labels): with values on
// the device uploaded once per micro-batch, through pinned staging, and
// kept for its backward; otherwise uploaded per call.
func (s *gpuScope) ints(v *Value[float32]) cuda.Buffer {
	r := s.resident()
	if r == nil {
		return s.upInts(v.Ints)
	}
	if b, ok := r.ints[v]; ok || s.err != nil {
		return b
	}
	b, err := s.d.UploadIntsAsync(v.Ints)
	if err != nil {
		s.fail(err)
		return b
	}
	r.ints[v] = b
	r.owned = append(r.owned, b)
	return b
}

// table is a constant int32 table a kernel reads (dims and strides): with
// a device state uploaded once for the executor's life, keyed by its
// contents; otherwise uploaded per call.
func (s *gpuScope) table(t []int32) cuda.Buffer {
	if s.dev == nil {
		return s.upInts(t)
	}
	key := "i" + string(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(t))), 4*len(t)))
	if b, ok := s.dev.consts[key]; ok || s.err != nil {
		return b
	}
	b, err := s.d.UploadIntsAsync(t)
	if err != nil {
		s.fail(err)
		return b
	}
	s.dev.consts[key] = b
	return b
}

// constant is table for float32 values (a constant op's row).
func (s *gpuScope) constant(c []float32) cuda.Buffer {
	if s.dev == nil {
		return s.up(c)
	}
	key := "f" + string(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(c))), 4*len(c)))
	if b, ok := s.dev.consts[key]; ok || s.err != nil {
		return b
	}
	b, err := s.d.UploadAsync(c)
	if err != nil {
		s.fail(err)
		return b
	}
	s.dev.consts[key] = b
	return b
}

// out makes b the value y: downloaded into y's host storage, or kept as
// y's device copy.
func (s *gpuScope) out(y *Value[float32], b cuda.Buffer) {
	if r := s.resident(); r != nil {
		if s.err == nil {
			s.own(b)
			r.hold(y, b)
		}
		return
	}
	s.down(y.Data, b)
}

// acc is a gradient to add into: a parameter's place in the flat
// gradients (devTrain), the micro-batch's accumulator of another value
// (made on first use from the value's host data, if any, else zeros), or,
// without a device state, an upload of it.
func (s *gpuScope) acc(v *Value[float32]) cuda.Buffer {
	r := s.resident()
	if r == nil {
		return s.up(v.Data)
	}
	if b, ok := r.vals[v]; ok {
		return b
	}
	if b, ok := s.dev.train.grads[v]; ok {
		return b
	}
	if v.Data != nil {
		return s.in(v)
	}
	b := s.zeros(tensor.Size(v.Shape))
	if s.err == nil {
		s.own(b)
		r.hold(v, b)
	}
	return b
}

// accInto is acc for a kernel that writes every element of the gradient
// it is given, and can write it as well as add into it: where v has no
// accumulator yet, a new one that is not zeroed, and fresh true (the
// kernel writes it: a memset and a read of zeros the less). Elsewhere it
// is acc, and fresh false.
func (s *gpuScope) accInto(v *Value[float32]) (b cuda.Buffer, fresh bool) {
	r := s.resident()
	if r == nil || v.Data != nil {
		return s.acc(v), false
	}
	_, held := r.vals[v]
	_, param := s.dev.train.grads[v]
	if held || param {
		return s.acc(v), false
	}
	b = s.scratch(tensor.Size(v.Shape))
	if s.err == nil {
		s.own(b)
		r.hold(v, b)
	}
	return b, s.err == nil
}

// clearIfFresh zeroes a fresh accumulator (accInto) that a kernel adding
// into it is about to be given.
func (s *gpuScope) clearIfFresh(b cuda.Buffer, fresh bool) {
	if fresh && s.err == nil {
		s.fail(s.d.Memset(b))
	}
}

// grad is acc, or a zero temporary when the caller does not want the
// gradient (v nil).
func (s *gpuScope) grad(v *Value[float32], n int) cuda.Buffer {
	if v == nil {
		return s.zeros(n)
	}
	return s.acc(v)
}

// gradOrNone is acc, or a null buffer when the caller does not want the
// gradient (v nil), for kernels that skip a null gradient.
func (s *gpuScope) gradOrNone(v *Value[float32]) cuda.Buffer {
	if v == nil {
		return cuda.Buffer{}
	}
	return s.acc(v)
}

// back brings an accumulated gradient back into v's host storage, when v is
// wanted and values do not stay on the device.
func (s *gpuScope) back(v *Value[float32], b cuda.Buffer) {
	if v != nil && s.resident() == nil {
		s.down(v.Data, b)
	}
}

// scalar is element 0 of v (a loss's seed gradient).
func (s *gpuScope) scalar(v *Value[float32]) float32 {
	if len(v.Data) > 0 {
		return v.Data[0]
	}
	var x [1]float32
	s.down(x[:], s.in(v))
	return x[0]
}

// stashBuf is a device buffer a backward pass needs again: downloaded to
// the host, or kept on the device for the micro-batch.
type stashBuf struct {
	host []float32
	dev  cuda.Buffer
	kept bool
}

func (s *gpuScope) stash(b cuda.Buffer, n int) stashBuf {
	if r := s.resident(); r != nil {
		if s.err == nil {
			s.own(b)
			r.owned = append(r.owned, b)
		}
		return stashBuf{dev: b, kept: true}
	}
	h := make([]float32, n)
	s.down(h, b)
	return stashBuf{host: h}
}

func (s *gpuScope) unstash(sb stashBuf) cuda.Buffer {
	if sb.kept {
		return sb.dev
	}
	return s.up(sb.host)
}

// param is a parameter's or buffer's device copy: its place in the
// stage's flat state (devTrain), or, without a device state, an upload.
func (s *gpuScope) param(v *Value[float32]) cuda.Buffer {
	if s.dev == nil {
		return s.up(v.Data)
	}
	b, ok := s.dev.train.views[v]
	if !ok && s.err == nil {
		s.fail(fmt.Errorf("a parameter of shape %v is not in the stage's state", v.Shape))
	}
	return b
}

// buffer is a buffer a kernel moves (batch_norm's running statistics):
// param's copy; backBuffer brings it back to v's host storage when values
// do not stay on the device, and otherwise notes that the device's
// buffers are newer than the host's.
func (s *gpuScope) buffer(v *Value[float32]) cuda.Buffer { return s.param(v) }

func (s *gpuScope) backBuffer(v *Value[float32], b cuda.Buffer) {
	if s.dev == nil {
		s.down(v.Data, b)
		return
	}
	s.dev.train.hostStale = true
}

// hold is n elements of device memory that outlive the scope: the
// stage's state, freed by whoever keeps it.
func (s *gpuScope) hold(n int) cuda.Buffer {
	if s.err != nil {
		return cuda.Buffer{}
	}
	b, err := s.d.Alloc(n)
	s.fail(err)
	return b
}

// upLongs uploads int64s (a kernel's long table) to be held.
func (s *gpuScope) upLongs(v []int64) cuda.Buffer {
	if s.err != nil {
		return cuda.Buffer{}
	}
	if len(v) == 0 {
		return s.hold(1)
	}
	b, err := s.d.UploadIntsAsync(unsafe.Slice((*int32)(unsafe.Pointer(&v[0])), 2*len(v)))
	s.fail(err)
	return b
}

// write copies host values into b (the state's bulk loads: pageable,
// waited for).
func (s *gpuScope) write(b cuda.Buffer, v []float32) {
	if s.err == nil {
		s.fail(s.d.Write(b, v))
	}
}

// wait waits for the work queued so far: an event recorded, then waited
// for (one sync).
func (s *gpuScope) wait() {
	if s.err != nil {
		return
	}
	ev, err := s.d.Record()
	if err != nil {
		s.fail(err)
		return
	}
	s.fail(s.d.Wait(ev))
}

func (s *gpuScope) launch(name string, n int, args ...any) {
	if s.err == nil {
		s.fail(s.d.Launch(name, n, args...))
	}
}

func (s *gpuScope) gemm(g cuda.GemmArgs) { s.product(g, 0, 0, 0, 0) }

func (s *gpuScope) batched(g cuda.GemmArgs, sa, sb, sc, count int) { s.product(g, sa, sb, sc, count) }

func (s *gpuScope) done() error {
	for _, b := range s.bufs {
		if err := s.d.Free(b); err != nil {
			s.fail(err)
		}
	}
	s.bufs = nil
	return s.err
}

// onDevice runs f in a scope with the device taken, the goroutine on one
// OS thread and the device's context current there (CUDA contexts are
// current per thread and goroutines move between threads).
func onDevice(d *cuda.Device, dev *devState, f func(s *gpuScope)) error {
	return onDeviceWith(d, dev, scopeOpts{}, f)
}

// onDeviceWith is onDevice with a test's options for the scope.
func onDeviceWith(d *cuda.Device, dev *devState, opts scopeOpts, f func(s *gpuScope)) error {
	defer d.Exclusive()()
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	s := &gpuScope{d: d, dev: dev, opts: opts}
	s.fail(d.Bind())
	if s.err == nil {
		f(s)
	}
	return s.done()
}

// gpuKernel wraps an op's GPU implementation; a device failure in a
// backward, which has no error result, is kept and reported by the
// executor's next call (Executor.devErr).
type gpuKernel struct {
	d    *cuda.Device
	dev  *devState
	opts scopeOpts // a test's (see scopeOpts)
	errp *error
	fwd  func(s *gpuScope, x, p []*Value[float32]) (*Value[float32], any, error)
	bwd  func(s *gpuScope, gy *Value[float32], x, p []*Value[float32], y *Value[float32], st any, gx, gp []*Value[float32])
}

func (k *gpuKernel) forward(x, p []*Value[float32]) (*Value[float32], any, error) {
	var y *Value[float32]
	var st any
	var err error
	derr := onDeviceWith(k.d, k.dev, k.opts, func(s *gpuScope) { y, st, err = k.fwd(s, x, p) })
	if err == nil && derr != nil {
		err = fmt.Errorf("gpu: %w", derr)
	}
	return y, st, err
}

func (k *gpuKernel) backward(gy *Value[float32], x, p []*Value[float32], y *Value[float32], st any, gx, gp []*Value[float32]) {
	err := onDeviceWith(k.d, k.dev, k.opts, func(s *gpuScope) { k.bwd(s, gy, x, p, y, st, gx, gp) })
	if err != nil && *k.errp == nil {
		*k.errp = fmt.Errorf("gpu: %w", err)
	}
}
