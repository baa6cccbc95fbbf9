package stage

import (
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
//     state live in the stage's flat state (train, gpu_state.go) from the
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
	bf16     bool            // matrix products round their operands to bf16 (SetPrecision)
	tf32     bool            // matrix products run in TF32 on the tensor cores (SetPrecision)
	// values that leave the stage device to device (gpu_link.go): outputs
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
// the others (keep false: what must outlive the micro-batch) are copied
// out of it into Go memory.
func (dev *devState) fetch(vals map[string]*Value[float32], want func(string) bool, keep bool) error {
	type pending struct {
		v  *Value[float32]
		st cuda.Staging
	}
	var queued []pending
	return onDevice(dev.d, nil, func(s *gpuScope) {
		for name, v := range vals {
			if v.Data != nil || v.Ints != nil || !want(name) || s.err != nil {
				continue
			}
			n := tensor.Size(v.Shape)
			b, ok := dev.cur.vals[v]
			if !ok || n == 0 {
				v.Data = make([]float32, n)
				continue
			}
			st, err := dev.d.Stage(4 * n)
			if err != nil {
				s.fail(err)
				continue
			}
			s.fail(dev.d.DownloadStaged(st, b))
			queued = append(queued, pending{v, st})
		}
		if len(queued) > 0 {
			s.wait()
		}
		for _, q := range queued {
			n := tensor.Size(q.v.Shape)
			if keep {
				q.v.Data = q.st.Float32s()[:n]
				dev.cur.staged = append(dev.cur.staged, stagedValue{q.v, q.st})
				continue
			}
			q.v.Data = append([]float32(nil), q.st.Float32s()[:n]...)
			s.fail(dev.d.Unstage(q.st))
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
	return onDevice(dev.d, nil, func(s *gpuScope) {
		for _, b := range r.owned {
			s.fail(dev.d.Free(b))
		}
		for _, sv := range r.staged {
			sv.v.Data = nil
			s.fail(dev.d.Unstage(sv.st))
		}
	})
}

// free gives back the tables and the training state.
func (dev *devState) free() error {
	return onDevice(dev.d, dev, func(s *gpuScope) {
		for k, b := range dev.consts {
			s.fail(dev.d.Free(b))
			delete(dev.consts, k)
		}
		dev.freeLinked(s)
		dev.train.free(s)
	})
}
