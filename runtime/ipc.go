package runtime

import (
	"context"
	"fmt"
	"os"
	goruntime "runtime"
	"slices"
	"strings"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// Same-host links. Workers on one host whose devices reach each other (the
// same GPU, a peer GPU, or the CUDA emulator, whose memory every process on
// the host opens) move an edge's tensors device to device: the sender's
// stage leaves them on its device (stage.Executor.KeepOnDevice), the sender
// exports their buffers (cuda.Device.Export) and sends the handles with the
// tensors' names and shapes over the reliable link, as a message of device
// tensors (wire.EncodeDeviceTensors); the receiver copies each into a
// buffer of its own on its copy stream (cuda.Device.CopyFromPeer, the
// handle opened once) and hands it to its stage (stage.Executor.Adopt),
// then acknowledges the copy (ipcAckMB); once acknowledged, the sender's
// buffers go back to its stage (stage.Executor.Return). Everything else
// goes over NATS as bytes: other hosts, the cpu, --no-ipc, edges between
// data-parallel stages, and tensors that a relay passes on or that go to
// several stages (their gradients are summed on the host).
//
// Every worker learns every other's linkID (hello, then the coordinator's
// mbPeers) and decides each edge alike (ipcEdge). The reliable link's
// contract holds for the handles as for bytes: resends, duplicate drops, a
// restart's new generation (whose workers export anew).

// linkID is a worker as its peers see it for same-host links.
type linkID struct {
	// Host names the host and the namespaces its processes share
	// (hostIdentity): two workers with the same one can open each other's
	// device memory.
	Host  string   `json:"host"`
	GPU   string   `json:"gpu,omitempty"`   // its device's identity (cuda.Device.Identity); "" on the cpu
	Peers []string `json:"peers,omitempty"` // the devices its device reaches as a peer
	NoIPC bool     `json:"no_ipc,omitempty"`
}

// ipcAckMB marks, in a message key's micro-batch field, the acknowledgement
// of a copy from a message of device tensors: the micro-batch plus it
// (below evalMBBase's keys).
const ipcAckMB = 1 << 29

// hostIdentity names this host and the namespaces that decide whether
// another process reads our device memory: the host's name and boot, and
// the process and IPC namespaces.
func hostIdentity() string {
	name, _ := os.Hostname()
	parts := []string{name}
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		parts = append(parts, strings.TrimSpace(string(b)))
	}
	for _, ns := range []string{"pid", "ipc"} {
		if l, err := os.Readlink("/proc/self/ns/" + ns); err == nil {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "/")
}

// localLinkID is this process's linkID for a worker on dev (nil: the cpu).
func localLinkID(dev *cuda.Device, noIPC bool) linkID {
	id := linkID{Host: hostIdentity(), NoIPC: noIPC}
	if dev != nil {
		defer dev.Exclusive()()
		id.GPU, id.Peers = dev.Identity(), dev.PeerIdentities()
	}
	return id
}

// reaches says whether devices a and b move memory between them.
func reaches(a, b linkID) bool {
	return a.Host == b.Host && a.GPU != "" && b.GPU != "" && !a.NoIPC && !b.NoIPC &&
		(a.GPU == b.GPU || slices.Contains(a.Peers, b.GPU) && slices.Contains(b.Peers, a.GPU))
}

// ipcEdge says whether edge e's tensors go by IPC, both ways: both stages
// on one device each and those devices reaching each other, and its
// tensors ones the plan lets go device to device (plan.IPCTensors).
func ipcEdge(p *plan.Plan, g *dag.Graph, lay replicas, ids []linkID, e int) bool {
	pe := p.Edges[e]
	if lay.count[pe.From] != 1 || lay.count[pe.To] != 1 {
		return false
	}
	from, to := lay.id(pe.From, 0), lay.id(pe.To, 0)
	if int(max(from, to)) >= len(ids) || !reaches(ids[from], ids[to]) {
		return false
	}
	return p.IPCTensors(g, e)
}

// setPeers takes every worker's linkID (by worker id) and decides which of
// the worker's edges go by IPC.
func (w *Worker) setPeers(ids []linkID) {
	w.links.ipc = map[int]bool{}
	if w.ex == nil || w.dev == nil {
		return
	}
	for e, pe := range w.role.plan.Edges {
		if (w.Stage == pe.From || w.Stage == pe.To) && ipcEdge(w.role.plan, w.role.g, w.role.lay, ids, e) {
			w.links.ipc[e] = true
		}
	}
}

// lentSend is a message whose tensors are device buffers lent by the
// stage: they go back once the receiver acknowledges its copy.
type lentSend struct {
	vals []*stage.Value[float32]
	peer int32
	ack  wire.Key
}

// onDevice runs f with the worker's device taken and current on this
// goroutine's thread.
func (w *Worker) onDevice(f func() error) error {
	defer w.dev.Exclusive()()
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if err := w.dev.Bind(); err != nil {
		return err
	}
	return f()
}

// sendDevice queues a message of device tensors to peer p for edge a's
// tensors vals, all lent by the stage; false (nothing sent) when one of
// them has no device buffer, for the caller to send bytes.
func (w *Worker) sendDevice(ctx context.Context, it *iteration, a microbatch.Action, p peer, names []string, vals []*stage.Value[float32]) (bool, error) {
	bufs := make([]cuda.Buffer, len(vals))
	for i, v := range vals {
		b, ok := w.ex.DeviceBuffer(v)
		if !ok {
			return false, nil
		}
		bufs[i] = b
	}
	start := time.Now()
	ts := make([]wire.DeviceTensor, len(vals))
	bytes := 0
	var computed cuda.Event
	err := w.onDevice(func() error {
		for i, v := range vals {
			h, off, err := w.dev.Export(bufs[i])
			if err != nil {
				return err
			}
			ts[i] = wire.DeviceTensor{Name: names[i], Shape: v.Shape, Handle: h, Offset: off}
			bytes += bufs[i].Bytes()
		}
		// the peer copies what the stream computes: the handles go once
		// it is done (the sender waits, the worker queues on)
		var err error
		computed, err = w.dev.Record()
		return err
	})
	if err != nil {
		return false, err
	}
	msg, err := wire.EncodeDeviceTensors(ts)
	if err != nil {
		return false, err
	}
	k := msgKey(it.n, int32(a.MB), edgeKey(a.Edge, w.Replica), byte(a.Dir))
	w.links.lent = append(w.links.lent, lentSend{vals: vals, peer: p.id, ack: msgKey(it.n, int32(a.MB)+ipcAckMB, k.Edge, k.Dir)})
	prep := time.Since(start).Seconds()
	send := func(ctx context.Context) error {
		if err := w.dev.WaitFree(computed); err != nil {
			return err
		}
		return w.links.ep.SendPayload(ctx, p.id, k, wire.Bytes(msg))
	}
	meter := w.links.meter.sent(a.Edge, byte(a.Dir), TransportIPC, bytes)
	return true, w.links.out.queue(&sendJob{ctx: ctx, mb: w.mbKey(it, a.MB), peer: p.id, k: k, send: send,
		done: func(err error, secs float64) { meter(err, secs+prep) }})
}

// recvDevice copies a message of device tensors from peer p into buffers
// of the worker's device, hands them to the stage for micro-batch a.MB
// (as shape-only values in parts) and acknowledges the copy.
func (w *Worker) recvDevice(ctx context.Context, it *iteration, a microbatch.Action, p peer, msg []byte, parts map[string]*stage.Value[float32]) error {
	if w.dev == nil {
		return fmt.Errorf("edge %d: a peer sent device tensors to a worker on the cpu", a.Edge)
	}
	ts, err := wire.DecodeDeviceTensors(msg)
	if err != nil {
		return err
	}
	start := time.Now()
	bytes := 0
	for _, t := range ts {
		if len(t.Shape) == 0 || t.Shape[0] != p.hi-p.lo {
			return fmt.Errorf("edge %d: tensor %q has shape %v for rows [%d, %d)", a.Edge, t.Name, t.Shape, p.lo, p.hi)
		}
		n := sizeOf(t.Shape)
		var b cuda.Buffer
		err := w.onDevice(func() error {
			var err error
			alloc := w.dev.Alloc
			if w.links.bf16 { // the run's precision, the sender's too: its tensors are bf16
				alloc = w.dev.HalfBuffer
			}
			if b, err = alloc(n); err != nil {
				return err
			}
			if err = w.dev.CopyFromPeer(b, t.Handle, t.Offset, n); err != nil {
				w.dev.Free(b)
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("edge %d: copying %q from worker %d's device: %w", a.Edge, t.Name, p.id, err)
		}
		v := &stage.Value[float32]{Shape: t.Shape}
		if err := w.ex.Adopt(w.mbKey(it, a.MB), v, b); err != nil {
			return err
		}
		parts[t.Name] = v
		bytes += b.Bytes()
	}
	w.links.meter.received(a.Edge, byte(a.Dir), TransportIPC, bytes, time.Since(start).Seconds())
	ack := msgKey(it.n, int32(a.MB)+ipcAckMB, edgeKey(a.Edge, p.replica), byte(a.Dir))
	return w.links.out.queue(&sendJob{ctx: ctx, mb: w.mbKey(it, a.MB), peer: p.id, k: ack, p: wire.Bytes(nil)})
}
