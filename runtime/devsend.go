package runtime

import (
	"fmt"
	"sync"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// Bytes over NATS from a device. A worker on a GPU has its stage leave the
// outputs it sends, and the gradients of what it was fed, on the device
// (stage.Executor.KeepOnDevice): the forward pass does not wait for their
// download. At the Send action the worker queues their download into
// pinned staging (cuda.Device.Stage: the pool hands an edge's staging back
// message after message) in pieces, an event after each, and hands the
// message to its sender; the frames are made from the staging memory as
// each piece's event passes (devicePiece.CopyAt), so the download of the
// piece after overlaps the publishing of the one before, and the device
// computes on meanwhile. Once the message is sent, its staging goes back
// and the stage gets its buffer back (finished, at the worker's next
// action).

// pieceBytes is the download's unit: about a frame's payload.
const pieceBytes = 1 << 20

// devicePiece is a tensor's data on its way down: a payload whose bytes
// are staged piece by piece, each piece's copy followed by an event.
type devicePiece struct {
	dev *cuda.Device
	st  cuda.Staging
	evs []cuda.Event
	n   int
	// waited is how many pieces' events have passed (CopyAt is called in
	// order, by the sender's goroutine alone)
	waited int
}

func (p *devicePiece) Len() int { return p.n }

func (p *devicePiece) CopyAt(dst []byte, off int) error {
	b, _, err := p.Slice(off, len(dst))
	copy(dst, b)
	return err
}

// Slice is the staged bytes [off, off+n) once their pieces have come down:
// the frames go out from the pinned memory itself (wire.Slicer).
func (p *devicePiece) Slice(off, n int) ([]byte, bool, error) {
	for end := off + n; p.waited < len(p.evs) && p.waited*pieceBytes < end; p.waited++ {
		if err := p.dev.WaitFree(p.evs[p.waited]); err != nil {
			return nil, false, err
		}
	}
	return p.st.Bytes()[off : off+n], true, nil
}

// downloadPiece queues the download of rows [lo, hi) of v, lent by the
// stage in buffer b, and returns it as a payload.
func (w *Worker) downloadPiece(v *stage.Value[float32], b cuda.Buffer, lo, hi int) (*devicePiece, error) {
	per := sizeOf(v.Shape[1:])
	p := &devicePiece{dev: w.dev, n: b.Elem() * (hi - lo) * per}
	if p.n == 0 {
		return p, nil
	}
	err := w.onDevice(func() error {
		var err error
		if p.st, err = w.dev.Stage(p.n); err != nil {
			return err
		}
		src := b.Offset(lo * per)
		for off := 0; off < p.n; off += pieceBytes {
			k := min(pieceBytes, p.n-off)
			if err := w.dev.DownloadStaged(p.st.Slice(off, k), src.Offset(off/b.Elem())); err != nil {
				return err
			}
			ev, err := w.dev.Record()
			if err != nil {
				return err
			}
			p.evs = append(p.evs, ev)
		}
		return nil
	})
	return p, err
}

// release gives back the staging of pieces sent (after a wait for every
// download queued into it, when the send failed part way).
func (p *devicePiece) release(failed bool) {
	if p.n == 0 {
		return
	}
	defer p.dev.Exclusive()()
	if failed {
		p.dev.Sync()
	}
	p.dev.Unstage(p.st)
}

// deviceSends counts, per value the stage lent, its pieces not yet sent;
// the sender's goroutine reports those sent (done), the worker's gives the
// values back (finished).
type deviceSends struct {
	mu   sync.Mutex                    // guards sent
	open map[*stage.Value[float32]]int // the worker's goroutine's alone
	sent []*stage.Value[float32]
}

func (d *deviceSends) add(v *stage.Value[float32]) {
	if d.open == nil {
		d.open = map[*stage.Value[float32]]int{}
	}
	d.open[v]++
}

func (d *deviceSends) done(v *stage.Value[float32]) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sent = append(d.sent, v)
}

// finished gives the stage's executor ex back the values whose every
// piece is sent.
func (d *deviceSends) finished(ex *stage.Executor) error {
	d.mu.Lock()
	sent := d.sent
	d.sent = nil
	d.mu.Unlock()
	for _, v := range sent {
		if d.open[v]--; d.open[v] > 0 {
			continue
		}
		delete(d.open, v)
		if err := ex.Return(v); err != nil {
			return err
		}
	}
	return nil
}

// messageSpecs lays out the message of tensors vals (names) to peer p,
// rows [lo, hi) of this replica's: those the stage lent on its device as
// downloads (pieces), the others from host memory.
func (w *Worker) messageSpecs(names []string, vals []*stage.Value[float32], lo, hi int) ([]wire.TensorSpec, []*devicePiece, []*stage.Value[float32], error) {
	var specs []wire.TensorSpec
	var pieces []*devicePiece
	var lent []*stage.Value[float32]
	for i, v := range vals {
		shape := append([]int{hi - lo}, v.Shape[1:]...)
		if w.ex != nil && w.dev != nil {
			if b, ok := w.ex.DeviceBuffer(v); ok {
				p, err := w.downloadPiece(v, b, lo, hi)
				if err != nil {
					return nil, nil, nil, err
				}
				specs = append(specs, wire.TensorSpec{Name: names[i], Shape: shape, BF16: b.Half, Data: p})
				pieces, lent = append(pieces, p), append(lent, v)
				continue
			}
		}
		if v.Data == nil && v.Ints == nil && sizeOf(v.Shape) > 0 {
			return nil, nil, nil, fmt.Errorf("tensor %q of shape %v has neither host data nor a device buffer", names[i], v.Shape)
		}
		part := stage.SliceRows(v, lo, hi)
		t := wire.Tensor{Name: names[i], Shape: part.Shape, F32: part.Data, I32: part.Ints, BF16: w.links.bf16 && part.Ints == nil}
		specs = append(specs, wire.TensorSpec{Name: names[i], Shape: part.Shape, Int: part.Ints != nil, BF16: t.BF16, Data: t.Data()})
	}
	return specs, pieces, lent, nil
}

// deviceSets names what the stage keeps on its device for the worker to
// send itself (none on the cpu): the float32 outputs it sends, and the
// gradients of what it is fed, whichever way they go (ipc.go, or here).
func (w *Worker) deviceSets() {
	if w.ex == nil || w.dev == nil {
		return
	}
	var outs, grads []string
	for _, pe := range w.role.plan.Edges {
		switch w.Stage {
		case pe.From:
			for _, x := range pe.Tensors {
				if i, ok := w.role.g.OpIndex(x); ok && w.role.ops[x] && w.role.g.Out(i).DType == dag.Float32 {
					outs = append(outs, x)
				}
			}
		case pe.To:
			grads = append(grads, pe.Tensors...)
		}
	}
	w.ex.KeepOnDevice(outs, grads)
}
