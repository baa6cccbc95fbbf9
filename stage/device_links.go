package stage

import (
	"fmt"

	"github.com/graphpipe/graphpipe/stage/internal/kernel"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// Values that cross the stage's boundary from device to device (a worker's
// same-host link: an IPC handle, a copy on the other side) never come to
// the host. The worker names them (KeepOnDevice); a training Forward then
// leaves those outputs on the device, and Backward those gradients of what
// was fed, each lent to the worker (DeviceBuffer) until it gives it back
// (Return): the micro-batch's release does not free a lent buffer, which
// goes back to the micro-batch if it is still in flight, and to the pool
// otherwise. The other way, Adopt makes a device buffer a micro-batch's fed
// value or given gradient, freed with the micro-batch.

// lentBuf is a buffer lent to the worker, and the residency it came from.
type lentBuf struct {
	b   cuda.Buffer
	mb  int
	res *residency
}

// adopted is a device buffer waiting for its micro-batch's Forward.
type adopted struct {
	v *Value[float32]
	b cuda.Buffer
}

// KeepOnDevice names the outputs a training Forward leaves on the device
// and the fed values whose gradients Backward leaves there, lent to the
// caller (DeviceBuffer); nil sets clear. On the CPU it does nothing: every
// value is on the host.
func (e *Executor) KeepOnDevice(outputs, grads []string) {
	b, ok := e.be.(*cudaBackend)
	if !ok {
		return
	}
	b.dev.keepOut, b.dev.keepGrad = setOf(outputs), setOf(grads)
}

func setOf(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// DeviceBuffer is the device memory of v, an output or gradient kept on
// the device and lent to the caller: valid, and unchanged by the stage,
// until Return.
func (e *Executor) DeviceBuffer(v *Value[float32]) (cuda.Buffer, bool) {
	b, ok := e.be.(*cudaBackend)
	if !ok {
		return cuda.Buffer{}, false
	}
	l, ok := b.dev.lent[v]
	return l.b, ok
}

// Return gives back the lent buffer of v: to its micro-batch if that is in
// flight and still reads it, to the pool otherwise.
func (e *Executor) Return(v *Value[float32]) error {
	b, ok := e.be.(*cudaBackend)
	if !ok {
		return nil
	}
	dev := b.dev
	l, ok := dev.lent[v]
	if !ok {
		return fmt.Errorf("stage: a value of shape %v was not lent", v.Shape)
	}
	delete(dev.lent, v)
	if r := dev.mbs[l.mb]; r == l.res && r.vals[v] == l.b {
		r.owned = append(r.owned, l.b)
		return nil
	}
	return kernel.OnDevice(dev.d, nil, func(s *kernel.Scope) { s.Fail(dev.d.Free(l.b)) })
}

// Adopt makes device buffer b micro-batch mb's value v (shape only): fed to
// its Forward, or a gradient given to its Backward. The micro-batch owns b
// from then on and frees it with the rest of its memory. On the CPU it is
// an error: there is no device.
func (e *Executor) Adopt(mb int, v *Value[float32], b cuda.Buffer) error {
	cb, ok := e.be.(*cudaBackend)
	if !ok {
		return fmt.Errorf("stage: adopting a device buffer on the %s backend", e.be.Name())
	}
	dev := cb.dev
	if r := dev.mbs[mb]; r != nil {
		r.hold(v, b)
		return nil
	}
	if dev.pending == nil {
		dev.pending = map[int][]adopted{}
	}
	dev.pending[mb] = append(dev.pending[mb], adopted{v, b})
	return nil
}

// lend takes v's device copy out of the current micro-batch's memory and
// lends it (dev.lent); false when v has none.
func (dev *devState) lend(v *Value[float32]) bool {
	r := dev.cur
	b, ok := r.vals[v]
	if !ok {
		return false
	}
	for i, o := range r.owned {
		if o.Ptr == b.Ptr {
			r.owned = append(r.owned[:i], r.owned[i+1:]...)
			break
		}
	}
	if dev.lent == nil {
		dev.lent = map[*Value[float32]]lentBuf{}
	}
	dev.lent[v] = lentBuf{b, r.mb, r}
	return true
}

// adoptPending gives micro-batch mb, begun, the buffers adopted for it.
func (dev *devState) adoptPending(mb int) {
	for _, a := range dev.pending[mb] {
		dev.cur.hold(a.v, a.b)
	}
	delete(dev.pending, mb)
}

// freeLinked frees what is lent or waits for adoption (the executor's end).
func (dev *devState) freeLinked(s *kernel.Scope) {
	for v, l := range dev.lent {
		s.Fail(dev.d.Free(l.b))
		delete(dev.lent, v)
	}
	for mb, list := range dev.pending {
		for _, a := range list {
			s.Fail(dev.d.Free(a.b))
		}
		delete(dev.pending, mb)
	}
}
