package kernel

import (
	"fmt"
	"unsafe"

	"github.com/graphpipe/graphpipe/tensor"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// Residency is where the values a scope's kernels read and write live
// between kernel calls, and where the stage's parameters are. Two
// implement it: the step room's device state (package stage), which keeps
// a micro-batch's values on the device from its forward to its backward,
// the parameters, their gradients and buffers in the stage's flat state,
// and the tables for the executor's life; and Copies, which keeps nothing
// there: every call uploads what it reads and downloads what it writes,
// so the host's values are always current (a kernel used alone, as the op
// tests use one).
type Residency interface {
	// Compute is how the scope's kernels compute.
	Compute() Compute
	Values
	Params
}

// Compute is how a scope's kernels compute: in which precision, and
// whether attention runs fused (gp_attn_fwd and its backward: the s × s
// scores never stored; otherwise as GEMMs, the scores stored).
type Compute struct {
	Precision Precision
	Fused     bool
}

// Values is how a residency holds the values of the micro-batch in
// flight.
type Values interface {
	// NewValue is an op's output of shape: with host storage, or the
	// shape alone where it will live on the device.
	NewValue(shape []int) *Value[float32]
	// Input is the device copy of a float value an op reads; Indices of
	// an int32 one (indices, labels).
	Input(s *Scope, v *Value[float32]) cuda.Buffer
	Indices(s *Scope, v *Value[float32]) cuda.Buffer
	// Table is the device copy of a constant table (dims and strides, a
	// constant's row) known by key, its contents; upload makes one, with
	// async through pinned staging without a wait.
	Table(s *Scope, key string, upload func(async bool) (cuda.Buffer, error)) cuda.Buffer
	// Output makes b, a temporary of s, the value y.
	Output(s *Scope, y *Value[float32], b cuda.Buffer)
	// Grad is the buffer v's gradient is added into; with whole, the
	// kernel writes all of it and may write rather than add: fresh says
	// the buffer is new and not zeroed.
	Grad(s *Scope, v *Value[float32], whole bool) (b cuda.Buffer, fresh bool)
	// GradDone says an op is done adding into Grad's b.
	GradDone(s *Scope, v *Value[float32], b cuda.Buffer)
	// Stash keeps b (n elements, a temporary of s) for the op's backward.
	Stash(s *Scope, b cuda.Buffer, n int) Stashed
}

// Params is how a residency holds the stage's parameters and buffers.
type Params interface {
	// Param is a parameter's or buffer's device copy; ParamGrad the buffer
	// a parameter's gradient is added into (float32 in every precision),
	// which GradDone ends as it ends an activation's.
	Param(s *Scope, v *Value[float32]) cuda.Buffer
	ParamGrad(s *Scope, v *Value[float32]) cuda.Buffer
	// Moved says a kernel has changed buffer v, whose copy Param gave as b
	// (batch_norm's running statistics).
	Moved(s *Scope, v *Value[float32], b cuda.Buffer)
	// Half is the bf16 copy of the whole parameter whose device copy is b,
	// for a product in BF16; an empty buffer when b is no parameter's.
	Half(s *Scope, b cuda.Buffer) cuda.Buffer
}

// Copies is the residency of a kernel used alone: nothing stays on the
// device between calls; the kernels compute as How says.
type Copies struct{ How Compute }

func (c Copies) Compute() Compute { return c.How }

func (Copies) NewValue(shape []int) *Value[float32] { return NewValue[float32](shape...) }

func (Copies) Input(s *Scope, v *Value[float32]) cuda.Buffer {
	if !s.HasData(v) {
		return cuda.Buffer{}
	}
	return s.upAct(v.Data)
}

func (Copies) Indices(s *Scope, v *Value[float32]) cuda.Buffer { return s.upInts(v.Ints) }

func (Copies) Table(s *Scope, _ string, upload func(bool) (cuda.Buffer, error)) cuda.Buffer {
	if s.err != nil {
		return cuda.Buffer{}
	}
	return s.keep(upload(false))
}

func (Copies) Output(s *Scope, y *Value[float32], b cuda.Buffer) { s.Down(y.Data, b) }

func (Copies) Grad(s *Scope, v *Value[float32], _ bool) (cuda.Buffer, bool) {
	return s.upAct(v.Data), false
}

func (Copies) GradDone(s *Scope, v *Value[float32], b cuda.Buffer) { s.Down(v.Data, b) }

func (Copies) Stash(s *Scope, b cuda.Buffer, n int) Stashed {
	h := make([]float32, n)
	s.Down(h, b)
	return Stashed{host: h, half: b.Half}
}

func (Copies) Param(s *Scope, v *Value[float32]) cuda.Buffer { return s.Up(v.Data) }

func (Copies) ParamGrad(s *Scope, v *Value[float32]) cuda.Buffer { return s.Up(v.Data) }

func (Copies) Moved(s *Scope, v *Value[float32], b cuda.Buffer) { s.Down(v.Data, b) }

func (Copies) Half(*Scope, cuda.Buffer) cuda.Buffer { return cuda.Buffer{} }

// HasData says whether v can be read from the host: it has host data, or
// nothing to read. Otherwise it fails the scope: v has neither host data
// nor (its residency has looked) a device copy.
func (s *Scope) HasData(v *Value[float32]) bool {
	if v.Data == nil && tensor.Size(v.Shape) > 0 {
		s.Fail(fmt.Errorf("a value of shape %v has neither host data nor a device copy", v.Shape))
		return false
	}
	return true
}

// newValue is an op's output: with host storage, or shape only when it
// will live on the device.
func (s *Scope) newValue(shape ...int) *Value[float32] { return s.res.NewValue(shape) }

// In is a value an op reads: its device copy, or an upload of its host
// data (Residency.Input).
func (s *Scope) In(v *Value[float32]) cuda.Buffer { return s.res.Input(s, v) }

// ints is an int32 value's device copy (indices, labels).
func (s *Scope) ints(v *Value[float32]) cuda.Buffer { return s.res.Indices(s, v) }

// table is a constant int32 table a kernel reads (dims and strides).
func (s *Scope) table(t []int32) cuda.Buffer {
	key := "i" + string(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(t))), 4*len(t)))
	return s.res.Table(s, key, func(async bool) (cuda.Buffer, error) {
		if async {
			return s.d.UploadIntsAsync(t)
		}
		return s.d.UploadInts(t)
	})
}

// constant is table for float32 values (a constant op's row).
func (s *Scope) constant(c []float32) cuda.Buffer {
	key := "f" + string(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(c))), 4*len(c)))
	return s.res.Table(s, key, func(async bool) (cuda.Buffer, error) {
		if async {
			return s.d.UploadAsync(c)
		}
		return s.d.Upload(c)
	})
}

// out makes b the value y.
func (s *Scope) out(y *Value[float32], b cuda.Buffer) { s.res.Output(s, y, b) }

// acc is a gradient to add into (Residency.Grad).
func (s *Scope) acc(v *Value[float32]) cuda.Buffer {
	b, _ := s.res.Grad(s, v, false)
	return b
}

// accInto is acc for a kernel that writes every element of the gradient
// it is given, and can write it as well as add into it: fresh true where
// the buffer is new and not zeroed (the kernel writes it: a memset and a
// read of zeros the less).
func (s *Scope) accInto(v *Value[float32]) (b cuda.Buffer, fresh bool) { return s.res.Grad(s, v, true) }

// grad is acc, or a zero temporary when the caller does not want the
// gradient (v nil): of an activation.
func (s *Scope) grad(v *Value[float32], n int) cuda.Buffer {
	if v == nil {
		return s.ActZeros(n)
	}
	return s.acc(v)
}

// pacc is acc for a parameter's gradient (Params.ParamGrad).
func (s *Scope) pacc(v *Value[float32]) cuda.Buffer { return s.res.ParamGrad(s, v) }

// paramGrad is grad for a parameter's gradient: float32 in every precision.
func (s *Scope) paramGrad(v *Value[float32], n int) cuda.Buffer {
	if v == nil {
		return s.Zeros(n)
	}
	return s.pacc(v)
}

// gradOrNone is acc, or a null buffer when the caller does not want the
// gradient (v nil), for kernels that skip a null gradient.
func (s *Scope) gradOrNone(v *Value[float32]) cuda.Buffer {
	if v == nil {
		return cuda.Buffer{}
	}
	return s.acc(v)
}

// back says an op is done adding into v's gradient b (acc), when v is
// wanted.
func (s *Scope) back(v *Value[float32], b cuda.Buffer) {
	if v != nil {
		s.res.GradDone(s, v, b)
	}
}

// scalar is element 0 of v (a loss's seed gradient).
func (s *Scope) scalar(v *Value[float32]) float32 {
	if len(v.Data) > 0 {
		return v.Data[0]
	}
	var x [1]float32
	s.Down(x[:], s.In(v))
	return x[0]
}

// Stashed is a device buffer a backward pass needs again: downloaded to
// the host (half: from a half buffer, to go back to one), or kept on the
// device for the micro-batch.
type Stashed struct {
	host []float32
	dev  cuda.Buffer
	kept bool
	half bool
}

// KeptStash is a stash kept on the device as b.
func KeptStash(b cuda.Buffer) Stashed { return Stashed{dev: b, kept: true} }

func (s *Scope) stash(b cuda.Buffer, n int) Stashed { return s.res.Stash(s, b, n) }

func (s *Scope) unstash(sb Stashed) cuda.Buffer {
	switch {
	case sb.kept:
		return sb.dev
	case sb.half:
		return s.upAct(sb.host)
	}
	return s.Up(sb.host)
}

// param is a parameter's or buffer's device copy.
func (s *Scope) param(v *Value[float32]) cuda.Buffer { return s.res.Param(s, v) }

// buffer is a buffer a kernel moves (batch_norm's running statistics):
// param's copy; backBuffer says the kernel moved it.
func (s *Scope) buffer(v *Value[float32]) cuda.Buffer { return s.param(v) }

func (s *Scope) backBuffer(v *Value[float32], b cuda.Buffer) { s.res.Moved(s, v, b) }
