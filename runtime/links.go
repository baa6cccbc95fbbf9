package runtime

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
)

// links is a worker's ends of its plan's edges: its endpoint, the sender
// its messages queue on, the edges whose tensors go device to device, the
// messages whose device buffers are lent until acknowledged or sent, and
// the meter of what its transfers took. The worker's goroutine uses them;
// the sender's goroutine adds to meter and devSends, each of which guards
// itself.
type links struct {
	ep    *wire.Endpoint
	out   *sender      // sends the computer's messages in order, while it computes on
	meter linkMeter    // this iteration's transfers, by edge and direction
	ipc   map[int]bool // the plan's edges whose tensors go device to device (ipc.go)
	lent  []lentSend   // messages of device tensors not yet acknowledged
	// devSends: values the stage lent that go as bytes, downloaded as
	// their frames go out (devsend.go)
	devSends deviceSends
	// bf16: the run computes in bf16, whose activations and gradients are
	// bf16 values: they cross as bf16, 2 bytes an element
	bf16 bool
}

// open starts the links over endpoint ep: its sender's goroutine, a
// meter for the first iteration.
func (l *links) open(ep *wire.Endpoint) {
	l.ep, l.out = ep, newSender(ep)
	l.meter.reset()
}

// release waits, before a pass that may end micro-batch a.MB, the
// sender's key (Worker.mbKey) (its backward, its weight gradients), until
// the micro-batch's messages are sent: they read its values where they lie.
func (l *links) release(ctx context.Context, a microbatch.Action, key int) error {
	if a.Kind != microbatch.Backward && a.Kind != microbatch.Weight {
		return nil
	}
	return l.out.wait(ctx, key)
}

// recycle gives the endpoint back the messages iteration it received,
// which nothing reads once its step is done.
func (l *links) recycle(it *iteration) {
	for _, m := range it.msgs {
		l.ep.Recycle(m)
	}
	it.msgs = nil
}

// giveBack returns to the stage's executor ex the buffers of the messages
// whose copies are acknowledged: all of them with wait (the iteration's
// end), else those whose acknowledgement has come.
func (l *links) giveBack(ctx context.Context, ex *stage.Executor, wait bool) error {
	kept := l.lent[:0]
	for _, s := range l.lent {
		if wait {
			if _, err := l.ep.Receive(ctx, s.ack); err != nil {
				return fmt.Errorf("waiting for worker %d's copy: %w", s.peer, err)
			}
		} else if _, ok := l.ep.TryReceive(s.ack); !ok {
			kept = append(kept, s)
			continue
		}
		for _, v := range s.vals {
			if err := ex.Return(v); err != nil {
				return err
			}
		}
	}
	clear(l.lent[len(kept):])
	l.lent = kept
	return nil
}

// close ends the sender's goroutine once what is queued is sent.
func (l *links) close() {
	if l.out != nil {
		l.out.close()
		l.out = nil
	}
}

// Transport is how an edge's tensors go from one worker to the next: bytes
// over NATS, or, between workers that share a host and reach each other's
// GPU, an IPC handle over NATS and a device-to-device copy (ipc.go). The
// plan's cost model prices the transport the run will use; the runtime
// reports the one it used (EdgeTimes).
type Transport string

const (
	TransportNATS Transport = "nats"
	TransportIPC  Transport = "ipc"
)

// LinkTime is what a worker measured of one edge, one direction and one
// end in an iteration: its messages, their bytes, and the seconds its end
// of them took (a send: from its start until its last frame is published,
// or for an IPC handle until the copy is acknowledged; a receive: placing
// what arrived, or the device copy, not the wait for it).
type LinkTime struct {
	Edge      int       `json:"edge"` // the plan's edge
	Dir       byte      `json:"dir"`  // 'a' activations, 'g' gradients
	Send      bool      `json:"send"` // the sending end, else the receiving one
	Transport Transport `json:"transport"`
	Messages  int       `json:"messages"`
	Bytes     int64     `json:"bytes"`
	Seconds   float64   `json:"seconds"`
}

// linkMeter sums a worker's LinkTimes over an iteration; the sender's
// goroutine and the worker's both add to it.
type linkMeter struct {
	mu   sync.Mutex // guards cur, last
	cur  map[linkEnd]*LinkTime
	last []LinkTime // the iteration before's, sorted
}

type linkEnd struct {
	edge int
	dir  byte
	send bool
}

func (m *linkMeter) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cur = map[linkEnd]*LinkTime{}
}

func (m *linkMeter) add(edge int, dir byte, send bool, t Transport, bytes int, secs float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := linkEnd{edge, dir, send}
	lt := m.cur[k]
	if lt == nil {
		lt = &LinkTime{Edge: edge, Dir: dir, Send: send}
		m.cur[k] = lt
	}
	if lt.Transport != TransportNATS { // one message over NATS names the edge's: it did not all go by IPC
		lt.Transport = t
	}
	lt.Messages++
	lt.Bytes += int64(bytes)
	lt.Seconds += secs
}

// sent is a send's done callback: it adds the send to the meter.
func (m *linkMeter) sent(edge int, dir byte, t Transport, bytes int) func(error, float64) {
	return func(err error, secs float64) {
		if err == nil {
			m.add(edge, dir, true, t, bytes, secs)
		}
	}
}

func (m *linkMeter) received(edge int, dir byte, t Transport, bytes int, secs float64) {
	m.add(edge, dir, false, t, bytes, secs)
}

// finish keeps the iteration's times as the last ones.
func (m *linkMeter) finish() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last = m.last[:0]
	for _, lt := range m.cur {
		m.last = append(m.last, *lt)
	}
	sort.Slice(m.last, func(i, j int) bool {
		a, b := m.last[i], m.last[j]
		if a.Edge != b.Edge {
			return a.Edge < b.Edge
		}
		if a.Dir != b.Dir {
			return a.Dir < b.Dir
		}
		return a.Send && !b.Send
	})
}

// lastTimes is a copy of the iteration before's times.
func (m *linkMeter) lastTimes() []LinkTime {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]LinkTime(nil), m.last...)
}

// EdgeTime is one plan edge's transfers in the last iteration, both
// directions, every replica: the transport they took (nats if any message
// went over NATS), their bytes and the seconds their ends measured
// (LinkTime), beside the plan's price of them where it has one.
type EdgeTime struct {
	Edge      int       `json:"edge"`
	From      int       `json:"from"` // the producing stage
	To        int       `json:"to"`   // the consuming stage
	Transport Transport `json:"transport"`
	Bytes     int64     `json:"bytes"`
	Measured  float64   `json:"measured_s"`
	// Predicted is the cost model's price of the edge per iteration, by
	// the transport the plan expects; 0 (left out) while the plan has none.
	Predicted float64 `json:"predicted_s,omitempty"`
}

// EdgeTimes is each plan edge's measured transfers in the run's last
// iteration, from every worker's reports; edges nothing crossed are left
// out.
func EdgeTimes(p *plan.Plan, res *Result) []EdgeTime {
	byEdge := map[int]*EdgeTime{}
	for _, lts := range res.Links {
		for _, lt := range lts {
			if lt.Edge < 0 || lt.Edge >= len(p.Edges) {
				continue
			}
			et := byEdge[lt.Edge]
			if et == nil {
				e := p.Edges[lt.Edge]
				et = &EdgeTime{Edge: lt.Edge, From: e.From, To: e.To, Predicted: p.EdgeSeconds(lt.Edge)}
				byEdge[lt.Edge] = et
			}
			if et.Transport != TransportNATS {
				et.Transport = lt.Transport
			}
			if lt.Send {
				et.Bytes += lt.Bytes
			}
			et.Measured += lt.Seconds
		}
	}
	out := make([]EdgeTime, 0, len(byEdge))
	for _, et := range byEdge {
		out = append(out, *et)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Edge < out[j].Edge })
	return out
}
