package kernel

import (
	"fmt"
	goruntime "runtime"
	"unsafe"

	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// Scope runs one GPU kernel call, or a piece of a step on the device. Its
// temporaries are freed by done; the first error sticks (later steps do
// nothing). Where the values it reads and writes live is its residency's
// business (Residency): on the device for an executor's micro-batches, or
// copied in and out per call (Copies).
type Scope struct {
	d    *cuda.Device
	res  Residency
	opts scopeOpts
	bufs []cuda.Buffer
	err  error
}

// Device is the scope's device.
func (s *Scope) Device() *cuda.Device { return s.d }

// Err is the scope's first error.
func (s *Scope) Err() error { return s.err }

// scopeOpts are what a test asks of a kernel used alone: products in TF32
// whatever the residency's precision, and conv2d's im2col path where
// cuDNN is loaded.
type scopeOpts struct {
	tf32      bool
	im2col    bool
	fusedAttn bool // attention's fused kernels, whatever the residency says (fusedAttention)
}

// tf32 says whether the scope's products (GEMMs, cuDNN's convolutions)
// run in TF32: the residency's precision, or the test's.
func (s *Scope) tf32() bool { return s.res.Compute().Precision == TF32 || s.opts.tf32 }

// bf16 says whether the scope's GEMMs round their operands to bf16.
func (s *Scope) bf16() bool { return s.res.Compute().Precision == BF16 }

func (s *Scope) Fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

func (s *Scope) keep(b cuda.Buffer, err error) cuda.Buffer {
	if err != nil {
		s.Fail(err)
		return b
	}
	s.bufs = append(s.bufs, b)
	return b
}

// own takes b out of the scope's temporaries: whoever registered it frees it.
func (s *Scope) Own(b cuda.Buffer) {
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
func (s *Scope) Scratch(n int) cuda.Buffer {
	if s.err != nil {
		return cuda.Buffer{}
	}
	return s.keep(s.d.Alloc(n))
}

// half says whether the scope's activations (op outputs, their gradients,
// what the backward keeps of them, a model input) are bf16: the
// residency's precision is.
func (s *Scope) half() bool { return s.res.Compute().Precision == BF16 }

// ActScratch is Scratch for an activation or an activation's gradient:
// bf16 in a bf16 scope (a half buffer), float32 otherwise.
func (s *Scope) ActScratch(n int) cuda.Buffer {
	if !s.half() {
		return s.Scratch(n)
	}
	if s.err != nil {
		return cuda.Buffer{}
	}
	return s.keep(s.d.HalfBuffer(n))
}

// ActZeros is Zeros for an activation or an activation's gradient.
func (s *Scope) ActZeros(n int) cuda.Buffer {
	if !s.half() {
		return s.Zeros(n)
	}
	if s.err != nil {
		return cuda.Buffer{}
	}
	return s.keep(s.d.HalfZeros(n))
}

// upAct is Up for an activation: rounded to bf16 in a bf16 scope.
func (s *Scope) upAct(v []float32) cuda.Buffer {
	if !s.half() {
		return s.Up(v)
	}
	b := s.ActScratch(len(v))
	s.Write(b, v)
	return b
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
func (s *Scope) colSums(m cuda.Buffer, rows, cols int, dst cuda.Buffer) {
	chunk, parts := colParts(rows, cols)
	if parts == 0 {
		return
	}
	part := s.Scratch(parts * cols)
	s.Launch("gp_colsum_part", parts*cols, m, part, rows, cols, chunk, parts)
	s.Launch("gp_colsum_fold", cols, part, dst, parts, cols)
}

func (s *Scope) Up(v []float32) cuda.Buffer {
	if s.err != nil {
		return cuda.Buffer{}
	}
	return s.keep(s.d.Upload(v))
}

func (s *Scope) upInts(v []int32) cuda.Buffer {
	if s.err != nil {
		return cuda.Buffer{}
	}
	return s.keep(s.d.UploadInts(v))
}

func (s *Scope) Zeros(n int) cuda.Buffer {
	if s.err != nil {
		return cuda.Buffer{}
	}
	return s.keep(s.d.Zeros(n))
}

func (s *Scope) Down(dst []float32, b cuda.Buffer) {
	if s.err == nil {
		s.Fail(s.d.Download(dst, b))
	}
}

// hold is n elements of device memory that outlive the scope: the
// stage's state, freed by whoever keeps it.
func (s *Scope) Hold(n int) cuda.Buffer {
	if s.err != nil {
		return cuda.Buffer{}
	}
	b, err := s.d.Alloc(n)
	s.Fail(err)
	return b
}

// upLongs uploads int64s (a kernel's long table) to be held.
func (s *Scope) UpLongs(v []int64) cuda.Buffer {
	if s.err != nil {
		return cuda.Buffer{}
	}
	if len(v) == 0 {
		return s.Hold(1)
	}
	b, err := s.d.UploadIntsAsync(unsafe.Slice((*int32)(unsafe.Pointer(&v[0])), 2*len(v)))
	s.Fail(err)
	return b
}

// write copies host values into b (the state's bulk loads: pageable,
// waited for).
func (s *Scope) Write(b cuda.Buffer, v []float32) {
	if s.err == nil {
		s.Fail(s.d.Write(b, v))
	}
}

// wait waits for the work queued so far: an event recorded, then waited
// for (one sync).
func (s *Scope) Wait() {
	if s.err != nil {
		return
	}
	ev, err := s.d.Record()
	if err != nil {
		s.Fail(err)
		return
	}
	s.Fail(s.d.Wait(ev))
}

// Launch runs kernel name over n work items: its bf16 form (name_h) where
// a buffer it is given is half (a bf16 scope's activations), which
// cuda.Device.Launch checks against the kernel's parameter types.
func (s *Scope) Launch(name string, n int, args ...any) {
	if s.err != nil {
		return
	}
	for _, a := range args {
		if b, ok := a.(cuda.Buffer); ok && b.Half && cuda.HasKernel(name+"_h") {
			name += "_h"
			break
		}
	}
	s.Fail(s.d.Launch(name, n, args...))
}

func (s *Scope) done() error {
	for _, b := range s.bufs {
		if err := s.d.Free(b); err != nil {
			s.Fail(err)
		}
	}
	s.bufs = nil
	return s.err
}

// OnDevice runs f in a scope on d with the values of res (nil: Copies, for
// work that reads and writes no op's values), the device taken, the
// goroutine on one OS thread and the device's context current there (CUDA
// contexts are current per thread and goroutines move between threads).
func OnDevice(d *cuda.Device, res Residency, f func(s *Scope)) error {
	return onDeviceWith(d, res, scopeOpts{}, f)
}

// onDeviceWith is OnDevice with a test's options for the scope.
func onDeviceWith(d *cuda.Device, res Residency, opts scopeOpts, f func(s *Scope)) error {
	defer d.Exclusive()()
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if res == nil {
		res = Copies{}
	}
	s := &Scope{d: d, res: res, opts: opts}
	s.Fail(d.Bind())
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
	res  Residency
	opts scopeOpts // a test's (see scopeOpts)
	errp *error
	fwd  func(s *Scope, x, p []*Value[float32]) (*Value[float32], any, error)
	bwd  func(s *Scope, gy *Value[float32], x, p []*Value[float32], y *Value[float32], st any, gx, gp []*Value[float32])
}

func (k *gpuKernel) Forward(x, p []*Value[float32]) (*Value[float32], any, error) {
	var y *Value[float32]
	var st any
	var err error
	derr := onDeviceWith(k.d, k.res, k.opts, func(s *Scope) { y, st, err = k.fwd(s, x, p) })
	if err == nil && derr != nil {
		err = fmt.Errorf("gpu: %w", derr)
	}
	return y, st, err
}

func (k *gpuKernel) Backward(gy *Value[float32], x, p []*Value[float32], y *Value[float32], st any, gx, gp []*Value[float32]) {
	err := onDeviceWith(k.d, k.res, k.opts, func(s *Scope) { k.bwd(s, gy, x, p, y, st, gx, gp) })
	if err != nil && *k.errp == nil {
		*k.errp = fmt.Errorf("gpu: %w", err)
	}
}

// BoolInt is a flag as a kernel's int32 argument.
func BoolInt(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// Im2col makes GPU kernel k's convolutions take the im2col path where
// cuDNN is loaded (on), or cuDNN's again, for timings that compare the
// two; false where k is no GPU kernel.
func Im2col(k Kernel[float32], on bool) bool {
	gk, ok := k.(*gpuKernel)
	if ok {
		gk.opts.im2col = on
	}
	return ok
}
