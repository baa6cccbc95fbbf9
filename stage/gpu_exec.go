package stage

import (
	"github.com/graphpipe/graphpipe/tensor"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// devState is the CUDA backend's device residency (backend_cuda.go).
// Values stay on the device while a micro-batch is in flight; the host sees
// only what crosses the stage's boundary:
//
//   - Forward uploads the values it is fed (once per micro-batch) and
//     downloads the outputs read outside the stage and the loss, into
//     pinned staging buffers whose host data stays valid until the
//     micro-batch is done; the other outputs come back with their shape
//     only.
//   - Backward uploads the gradients it is given and downloads the gradients
//     of the values it was fed.
//   - Parameters are uploaded at their first use and kept there until the
//     backend marks them stale (an optimizer step, a restore, a load); the
//     next Forward with nothing in flight drops the device copies.
//   - Parameter gradients accumulate on the device over every micro-batch
//     of an iteration and are added into the host gradients
//     (Executor.Grads) when the step gathers them (syncGrads), before
//     anything reads the host gradients (the all-reduce, the optimizer).
//     Moving a stage's weights both ways per micro-batch would cost more
//     than the micro-batch's compute on a large model.
//   - A micro-batch's device memory (activations, gradients, stash) goes
//     back to the pool when the micro-batch is done.
type devState struct {
	d        *cuda.Device
	params   map[*Value[float32]]cuda.Buffer
	uploads  int // parameter uploads so far
	pgrads   map[*Value[float32]]cuda.Buffer
	isGrad   map[*Value[float32]]struct{} // the executor's parameter gradients
	cur      *residency
	mbs      map[int]*residency
	external map[string]bool // op outputs read outside the stage, and the loss
	stale    bool            // the host's parameters changed since their upload
	bf16     bool            // matrix products round their operands to bf16 (SetPrecision)
	tf32     bool            // matrix products run in TF32 on the tensor cores (SetPrecision)
}

// residency is one micro-batch's device copies.
type residency struct {
	vals   map[*Value[float32]]cuda.Buffer
	owned  []cuda.Buffer // freed with the micro-batch
	staged []stagedValue // outputs whose host data is pinned staging memory
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
// the stage, which values are parameter gradients.
func newDevState(d *cuda.Device, e *Executor) *devState {
	dev := &devState{d: d, params: map[*Value[float32]]cuda.Buffer{}, pgrads: map[*Value[float32]]cuda.Buffer{},
		isGrad: map[*Value[float32]]struct{}{}, mbs: map[int]*residency{}, external: map[string]bool{}}
	for _, g := range e.Grads {
		dev.isGrad[g] = struct{}{}
	}
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
	dev.cur = &residency{vals: map[*Value[float32]]cuda.Buffer{}}
	dev.mbs[mb] = dev.cur
}

func (dev *devState) use(mb int) { dev.cur = dev.mbs[mb] }

// dropParams forgets the parameters' copies: the host's have changed.
func (dev *devState) dropParams() error {
	dev.stale = false
	return onDevice(dev.d, nil, func(s *gpuScope) {
		for v, b := range dev.params {
			s.fail(dev.d.Free(b))
			delete(dev.params, v)
		}
	})
}

// fetch gives each wanted value without host data its device copy's
// contents (zeros when it has none: a gradient nothing added into), in
// pinned staging memory when staged (see stagedValue), else in Go memory.
func (dev *devState) fetch(vals map[string]*Value[float32], want func(string) bool, staged bool) error {
	return onDevice(dev.d, nil, func(s *gpuScope) {
		for name, v := range vals {
			if v.Data != nil || v.Ints != nil || !want(name) || s.err != nil {
				continue
			}
			n := tensor.Size(v.Shape)
			if staged {
				st, err := dev.d.Stage(4 * n)
				if err != nil {
					s.fail(err)
					continue
				}
				v.Data = st.Float32s()[:n]
				dev.cur.staged = append(dev.cur.staged, stagedValue{v, st})
			} else {
				v.Data = make([]float32, n)
			}
			if b, ok := dev.cur.vals[v]; ok {
				s.down(v.Data, b)
			} else {
				clear(v.Data)
			}
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

// syncGrads adds the parameter gradients on the device into the host's
// and frees them, or only frees them when add is false.
func (dev *devState) syncGrads(add bool) error {
	return onDevice(dev.d, nil, func(s *gpuScope) {
		var g []float32 // one host buffer for every parameter's download
		for v, b := range dev.pgrads {
			if add && s.err == nil {
				if cap(g) < len(v.Data) {
					g = make([]float32, len(v.Data))
				}
				g = g[:len(v.Data)]
				s.down(g, b)
				if s.err == nil {
					addIntoSpans(v.Data, g)
				}
			}
			s.fail(dev.d.Free(b))
			delete(dev.pgrads, v)
		}
	})
}
