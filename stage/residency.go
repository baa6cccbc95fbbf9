package stage

import (
	"fmt"

	"github.com/graphpipe/graphpipe/stage/internal/kernel"
	"github.com/graphpipe/graphpipe/tensor"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// devState is the CUDA backend's device residency (backend_cuda.go).
// Values stay on the device while a micro-batch is in flight; the host sees
// only what crosses the stage's boundary:
//
//   - Forward uploads the values it is fed, and the indices and labels,
//     once per micro-batch, through pinned staging buffers, without
//     waiting; it downloads the outputs read outside the stage into pinned
//     staging buffers whose host data stays valid until the micro-batch is
//     done, all of a pass's with one wait; the other outputs come back
//     with their shape only. In training the loss stays on the device too:
//     the step reads it (devTrain).
//   - Backward uploads the gradients it is given and downloads the
//     gradients of the values it was fed (one wait a pass).
//   - The parameters, their gradients, the buffers and the optimizer's
//     state live in the stage's flat state (train, device_state.go) from the
//     first step to the last; a kernel reads a parameter at its place
//     there and adds a parameter's gradient into its place there.
//   - The tables kernels read (dims and strides, a constant's row) are
//     uploaded once (consts).
//   - A micro-batch's device memory (activations, gradients, stash) goes
//     back to the pool when the micro-batch is done.
type devState struct {
	d        *cuda.Device
	train    *devTrain
	consts   map[string]cuda.Buffer // tables and constants by contents, kept for the executor's life
	cur      *residency
	mbs      map[int]*residency
	external map[string]bool // op outputs read outside the stage, and the loss
	loss     string          // the loss op's name when the stage holds it
	how      kernel.Compute  // the precision and attention the kernels compute in (SetPrecision, SetAttention)
	// values that leave the stage device to device (device_links.go): outputs
	// and gradients of fed values kept there, the buffers lent out, and
	// buffers adopted for micro-batches not yet begun
	keepOut, keepGrad map[string]bool
	lent              map[*Value[float32]]lentBuf
	pending           map[int][]adopted
}

// residency is one micro-batch's device copies.
type residency struct {
	mb     int
	vals   map[*Value[float32]]cuda.Buffer
	ints   map[*Value[float32]]cuda.Buffer // int32 values' copies (indices, labels)
	owned  []cuda.Buffer                   // freed with the micro-batch
	staged []stagedValue                   // outputs whose host data is pinned staging memory
}

// stagedValue is a Forward output downloaded into a pinned staging buffer,
// which frames are encoded from without another copy. It is valid until
// the micro-batch is done (its activations have been sent by then); at
// release its Data is set to nil, so a late reader fails loudly instead of
// reading a reused buffer.
type stagedValue struct {
	v  *Value[float32]
	st cuda.Staging
}

func (r *residency) hold(v *Value[float32], b cuda.Buffer) {
	r.vals[v] = b
	r.owned = append(r.owned, b)
}

// newDevState is the device state of e's stage on d: which outputs leave
// the stage, and the stage's training state.
func newDevState(d *cuda.Device, e *Executor) *devState {
	dev := &devState{d: d, train: newDevTrain(d, e), consts: map[string]cuda.Buffer{}, mbs: map[int]*residency{},
		external: map[string]bool{}, loss: e.lossOp}
	in := map[int]bool{}
	for _, i := range e.ops {
		in[i] = true
	}
	for _, i := range e.ops {
		if i == e.g.Loss() {
			dev.external[e.g.Op(i).Name] = true
		}
		for _, c := range e.g.Consumers(i) {
			if !in[c] {
				dev.external[e.g.Op(i).Name] = true
			}
		}
	}
	return dev
}

// begin starts micro-batch mb's residency; use resumes it.
func (dev *devState) begin(mb int) {
	dev.cur = &residency{mb: mb, vals: map[*Value[float32]]cuda.Buffer{}, ints: map[*Value[float32]]cuda.Buffer{}}
	dev.mbs[mb] = dev.cur
	dev.adoptPending(mb)
}

func (dev *devState) use(mb int) { dev.cur = dev.mbs[mb] }

// fetch gives each wanted value without host data its device copy's
// contents (zeros when it has none: a gradient nothing added into). Every
// copy goes through pinned staging, all queued before one wait. Staged
// values keep the staging memory as their host data (see stagedValue);
// the others (keep false: what must outlive the micro-batch), and a bf16
// stage's (16-bit on the device, float32 on the host), are copied out of
// it into Go memory.
func (dev *devState) fetch(vals map[string]*Value[float32], want func(string) bool, keep bool) error {
	type pending struct {
		v    *Value[float32]
		st   cuda.Staging
		half bool
	}
	var queued []pending
	return kernel.OnDevice(dev.d, nil, func(s *kernel.Scope) {
		for name, v := range vals {
			if v.Data != nil || v.Ints != nil || !want(name) || s.Err() != nil {
				continue
			}
			n := tensor.Size(v.Shape)
			b, ok := dev.cur.vals[v]
			if !ok || n == 0 {
				v.Data = make([]float32, n)
				continue
			}
			st, err := dev.d.Stage(b.Elem() * n)
			if err != nil {
				s.Fail(err)
				continue
			}
			s.Fail(dev.d.DownloadStaged(st, b))
			queued = append(queued, pending{v, st, b.Half})
		}
		if len(queued) > 0 {
			s.Wait()
		}
		for _, q := range queued {
			n := tensor.Size(q.v.Shape)
			if q.half { // bf16 on the device: widened into Go memory
				q.v.Data = make([]float32, n)
				tensor.GetBF16(q.v.Data, q.st.Uint16s()[:n])
				s.Fail(dev.d.Unstage(q.st))
				continue
			}
			if keep {
				q.v.Data = q.st.Float32s()[:n]
				dev.cur.staged = append(dev.cur.staged, stagedValue{q.v, q.st})
				continue
			}
			q.v.Data = append([]float32(nil), q.st.Float32s()[:n]...)
			s.Fail(dev.d.Unstage(q.st))
		}
	})
}

// release frees micro-batch mb's device memory.
func (dev *devState) release(mb int) error {
	r := dev.mbs[mb]
	delete(dev.mbs, mb)
	if dev.cur == r {
		dev.cur = nil
	}
	if r == nil {
		return nil
	}
	return kernel.OnDevice(dev.d, nil, func(s *kernel.Scope) {
		for _, b := range r.owned {
			s.Fail(dev.d.Free(b))
		}
		for _, sv := range r.staged {
			sv.v.Data = nil
			s.Fail(dev.d.Unstage(sv.st))
		}
	})
}

// free gives back the tables and the training state.
func (dev *devState) free() error {
	return kernel.OnDevice(dev.d, dev, func(s *kernel.Scope) {
		for k, b := range dev.consts {
			s.Fail(dev.d.Free(b))
			delete(dev.consts, k)
		}
		dev.freeLinked(s)
		dev.train.free(s)
	})
}

// devState is the kernels' residency (kernel.Residency): a micro-batch's
// values stay on the device while it is in flight (cur); where none is
// (a kernel run outside a pass), every call copies what it reads and
// writes, as kernel.Copies does. The parameters, their gradients and the
// buffers are the training state's (devTrain), the tables the executor's.

func (dev *devState) Compute() kernel.Compute { return dev.how }

// NewValue is an op's output: shape only while a micro-batch is in flight.
func (dev *devState) NewValue(shape []int) *Value[float32] {
	if dev.cur == nil {
		return kernel.Copies{}.NewValue(shape)
	}
	return &Value[float32]{Shape: append([]int(nil), shape...)}
}

// Input is v's device copy, or an upload of its host data through pinned
// staging without a wait (rounded to bf16 in a bf16 stage), kept for the
// micro-batch (values are never changed once made): a micro-batch's feeds
// cross once.
func (dev *devState) Input(s *kernel.Scope, v *Value[float32]) cuda.Buffer {
	r := dev.cur
	if r == nil {
		return kernel.Copies{}.Input(s, v)
	}
	if b, ok := r.vals[v]; ok {
		return b
	}
	if !s.HasData(v) || s.Err() != nil {
		return cuda.Buffer{}
	}
	upload := dev.d.UploadAsync
	if dev.how.Precision == kernel.BF16 { // a bf16 stage's values are bf16 on the device: rounded as they are staged
		upload = dev.d.UploadHalfAsync
	}
	b, err := upload(v.Data)
	if err != nil {
		s.Fail(err)
		return b
	}
	r.hold(v, b)
	return b
}

// Indices is an int32 value's device copy, uploaded once per micro-batch
// through pinned staging and kept for its backward.
func (dev *devState) Indices(s *kernel.Scope, v *Value[float32]) cuda.Buffer {
	r := dev.cur
	if r == nil {
		return kernel.Copies{}.Indices(s, v)
	}
	if b, ok := r.ints[v]; ok || s.Err() != nil {
		return b
	}
	b, err := dev.d.UploadIntsAsync(v.Ints)
	if err != nil {
		s.Fail(err)
		return b
	}
	r.ints[v] = b
	r.owned = append(r.owned, b)
	return b
}

// Table is a table uploaded once for the executor's life, by contents.
func (dev *devState) Table(s *kernel.Scope, key string, upload func(bool) (cuda.Buffer, error)) cuda.Buffer {
	if b, ok := dev.consts[key]; ok || s.Err() != nil {
		return b
	}
	b, err := upload(true)
	if err != nil {
		s.Fail(err)
		return b
	}
	dev.consts[key] = b
	return b
}

// Output keeps b as y's device copy.
func (dev *devState) Output(s *kernel.Scope, y *Value[float32], b cuda.Buffer) {
	r := dev.cur
	if r == nil {
		kernel.Copies{}.Output(s, y, b)
		return
	}
	if s.Err() == nil {
		s.Own(b)
		r.hold(y, b)
	}
}

// Grad is v's accumulator: its device copy in the micro-batch, its place
// in the flat gradients (devTrain) for a parameter, an upload of its host
// data, or a new one (zeros; not zeroed, and fresh, where whole).
func (dev *devState) Grad(s *kernel.Scope, v *Value[float32], whole bool) (cuda.Buffer, bool) {
	r := dev.cur
	if r == nil {
		return kernel.Copies{}.Grad(s, v, whole)
	}
	if b, ok := r.vals[v]; ok {
		return b, false
	}
	if b, ok := dev.train.grads[v]; ok {
		return b, false
	}
	if v.Data != nil {
		return s.In(v), false
	}
	var b cuda.Buffer
	if n := tensor.Size(v.Shape); whole {
		b = s.ActScratch(n)
	} else {
		b = s.ActZeros(n)
	}
	if s.Err() == nil {
		s.Own(b)
		r.hold(v, b)
	}
	return b, whole && s.Err() == nil
}

// GradDone leaves an accumulated gradient on the device.
func (dev *devState) GradDone(s *kernel.Scope, v *Value[float32], b cuda.Buffer) {
	if dev.cur == nil {
		kernel.Copies{}.GradDone(s, v, b)
	}
}

// Stash keeps b on the device for the micro-batch.
func (dev *devState) Stash(s *kernel.Scope, b cuda.Buffer, n int) kernel.Stashed {
	r := dev.cur
	if r == nil {
		return kernel.Copies{}.Stash(s, b, n)
	}
	if s.Err() == nil {
		s.Own(b)
		r.owned = append(r.owned, b)
	}
	return kernel.KeptStash(b)
}

// Param is a parameter's or buffer's place in the stage's flat state.
func (dev *devState) Param(s *kernel.Scope, v *Value[float32]) cuda.Buffer {
	b, ok := dev.train.views[v]
	if !ok && s.Err() == nil {
		s.Fail(fmt.Errorf("a parameter of shape %v is not in the stage's state", v.Shape))
	}
	return b
}

// ParamGrad is a parameter's place in the flat gradients (devTrain).
func (dev *devState) ParamGrad(s *kernel.Scope, v *Value[float32]) cuda.Buffer {
	if dev.cur == nil {
		return kernel.Copies{}.ParamGrad(s, v)
	}
	if b, ok := dev.train.grads[v]; ok {
		return b
	}
	b, _ := dev.Grad(s, v, false)
	return b
}

// Moved notes that the device's buffers are newer than the host's.
func (dev *devState) Moved(*kernel.Scope, *Value[float32], cuda.Buffer) { dev.train.hostStale = true }

// Half is a parameter's bf16 copy, made once a step (devTrain.half), while
// a micro-batch is in flight.
func (dev *devState) Half(s *kernel.Scope, b cuda.Buffer) cuda.Buffer {
	if dev.cur == nil {
		return cuda.Buffer{}
	}
	return dev.train.half(s, b)
}
