package wire

import (
	"context"
	"fmt"
	goruntime "runtime"
	"sync"
	"time"
)

// Key names one message: a micro-batch's tensors on an edge, one way. The
// runtime also keys its control messages so (edge -1), with the fields
// holding what it needs to name the sender.
type Key struct {
	Iter int64
	MB   int32
	Edge int32
	Dir  uint8 // 'a' activations, 'g' gradients
}

// Endpoint is a stage's reliable messaging: it sends messages in chunks over
// per-link windows with acknowledgements and resends, and assembles what it
// receives, dropping duplicates and frames of older generations.
type Endpoint struct {
	t      Transport
	split  SplitTransport // t, when it carries payloads apart from their frames' fields
	run    string
	gen    uint32
	stage  int32
	window int
	resend time.Duration // the least resend timeout (and the first, before any ack)
	unsub  func()

	mu      sync.Mutex // guards everything below
	cond    *sync.Cond
	nextSeq map[linkKey]uint64
	unacked map[linkKey]map[uint64]*pending
	chunks  map[Key]*assembly // messages arriving in chunks
	got     map[Key][]byte    // complete messages not yet taken
	taken   map[Key]bool      // delivered: later duplicates are dropped
	floor   int64             // frames of iterations before it are stale
	failure error
	stats   Stats
	rtt     rttEstimate
	acks    sync.WaitGroup // acknowledgements being published (Close waits for them)
	spare   [][]byte       // buffers of acknowledged frames, for the next ones
	kept    [][]byte       // buffers of messages given back (Recycle), for the next assemblies
	keptN   int            // their bytes
}

// maxResend caps a chunk's resend timeout as it backs off.
const maxResend = 2 * time.Second

// rttEstimate is the smoothed round trip of acknowledged chunks and its
// variation (RFC 6298's SRTT and RTTVAR), from which the resend timeout
// follows: a busy receiver or a full link slows acknowledgements, and
// resending on a fixed short timer would then multiply the traffic that
// slowed them.
type rttEstimate struct {
	srtt, rttvar time.Duration
	samples      int
}

func (r *rttEstimate) add(sample time.Duration) {
	if r.samples++; r.samples == 1 {
		r.srtt, r.rttvar = sample, sample/2
		return
	}
	d := r.srtt - sample
	if d < 0 {
		d = -d
	}
	r.rttvar = (3*r.rttvar + d) / 4
	r.srtt = (7*r.srtt + sample) / 8
}

// timeout is the resend timeout: srtt + 4·rttvar, at least floor, at most
// maxResend; floor before any sample.
func (r *rttEstimate) timeout(floor time.Duration) time.Duration {
	if r.samples == 0 {
		return floor
	}
	return min(max(r.srtt+4*r.rttvar, floor), maxResend)
}

// Stats count what the endpoint saw.
type Stats struct {
	Sent, Resent, Received, Duplicates, Stale, Bytes int64
}

// linkKey is one direction of traffic to one peer.
type linkKey struct {
	peer int32
	edge int32
	dir  uint8
}

type pending struct {
	subject string
	data    []byte        // the frame; for a split one (head set), its payload in the sender's memory
	head    []byte        // a split frame's fields
	firstAt time.Time     // first sent: its ack times the round trip, unless resent
	sentAt  time.Time     // last sent
	wait    time.Duration // the resend timeout it backs off from (0: the endpoint's)
	resent  bool
	busy    int  // publishes of data under way: its buffer is not reused before they end
	acked   bool // acknowledged: its buffer goes back once no publish holds it
}

// Inbox is the subject a stage receives on.
func Inbox(run string, gen uint32, stage int32) string {
	return fmt.Sprintf("graphpipe.%s.g%d.s%d", run, gen, stage)
}

// NewEndpoint subscribes stage's inbox.
func NewEndpoint(t Transport, run string, gen uint32, stage int32) (*Endpoint, error) {
	e := &Endpoint{t: t, run: run, gen: gen, stage: stage, window: 32, resend: 100 * time.Millisecond,
		nextSeq: map[linkKey]uint64{}, unacked: map[linkKey]map[uint64]*pending{},
		chunks: map[Key]*assembly{}, got: map[Key][]byte{}, taken: map[Key]bool{}}
	e.cond = sync.NewCond(&e.mu)
	var unsub func()
	var err error
	if st, ok := t.(SplitTransport); ok && st.Splits() {
		e.split = st
		unsub, err = st.SubscribeSplit(Inbox(run, gen, stage), e.handleSplit)
	} else {
		unsub, err = t.Subscribe(Inbox(run, gen, stage), e.handle)
	}
	if err != nil {
		return nil, err
	}
	e.unsub = unsub
	go e.resender()
	return e, nil
}

// Close stops the endpoint and wakes everything waiting on it. It returns
// once the acknowledgements of what it received are published: a
// coordinator closes its transport right after the last message it needs,
// and the sender of that message waits for the acknowledgement.
func (e *Endpoint) Close() {
	e.unsub()
	e.mu.Lock()
	if e.failure == nil {
		e.failure = errClosed
	}
	e.cond.Broadcast()
	e.mu.Unlock()
	e.acks.Wait()
}

// Stats is a snapshot of the endpoint's counters.
func (e *Endpoint) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats
}

// Send delivers one message to peer, in chunks, each kept until acknowledged.
func (e *Endpoint) Send(ctx context.Context, peer int32, k Key, payload []byte) error {
	return e.SendPayload(ctx, peer, k, Bytes(payload))
}

// SendPayload is Send of a payload read piece by piece: each chunk's bytes
// are copied from p straight into its frame (p.CopyAt, which may wait for
// them) and the frame published before the next chunk is read, so that a
// payload still on its way (a device's download, queued whole before)
// arrives while the chunks before it are published. The caller may change
// p's memory once SendPayload returns.
func (e *Endpoint) SendPayload(ctx context.Context, peer int32, k Key, p Payload) error {
	size := max(e.t.MaxPayload()-512-2*len(e.run), 64) // room for the fields, whole or in a header
	chunks := max(1, (p.Len()+size-1)/size)
	subject := Inbox(e.run, e.gen, peer)
	defer e.wakeOn(ctx)()
	var lent []uint64 // frames whose payload is p's memory, split off
	lk := linkKey{peer, k.Edge, k.Dir}
	for c := 0; c < chunks; c++ {
		fr, err := e.frame(ctx, peer, k, p, c, chunks, size)
		if err != nil {
			return err
		}
		if fr.head != nil {
			lent = append(lent, fr.seq)
		}
		if err := e.publish(fr, subject); err != nil {
			return err
		}
	}
	if len(lent) > 0 { // p's memory is the caller's again once we return
		return e.acked(ctx, lk, lent)
	}
	// a transport may hand the bytes to a goroutine of its own (NATS's
	// flusher); a worker with one thread would otherwise compute on and
	// hold the message back until it next waits
	goruntime.Gosched()
	return nil
}

// Slicer is a payload that lends its bytes where they lie: Slice is the n
// bytes at off as one slice of its memory, unchanged until the send
// returns; false where they are not one slice. A split transport then
// sends them from there.
type Slicer interface {
	Slice(off, n int) ([]byte, bool, error)
}

func (b Bytes) Slice(off, n int) ([]byte, bool, error) { return b[off : off+n], true, nil }

func (c Concat) Slice(off, n int) ([]byte, bool, error) {
	for _, p := range c {
		l := p.Len()
		if off >= l {
			off -= l
			continue
		}
		if s, ok := p.(Slicer); ok && off+n <= l {
			return s.Slice(off, n)
		}
		return nil, false, nil
	}
	return nil, false, nil
}

// acked waits until link lk's frames seqs are acknowledged.
func (e *Endpoint) acked(ctx context.Context, lk linkKey, seqs []uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		open := false
		for _, s := range seqs {
			if e.unacked[lk][s] != nil {
				open = true
				break
			}
		}
		if !open {
			return nil
		}
		if err := e.failed(ctx); err != nil {
			return err
		}
		e.cond.Wait()
	}
}

// framed is one chunk's frame, made and not yet published: whole (data),
// or split (head, and data the payload's own memory).
type framed struct {
	lk   linkKey
	seq  uint64
	data []byte
	head []byte
}

// frame makes chunk c of chunks of message k's payload p, size bytes a
// chunk: split where the transport and the payload allow (a chunk of the
// payload's memory, lent until SendPayload returns), else whole, its
// payload copied in.
func (e *Endpoint) frame(ctx context.Context, peer int32, k Key, p Payload, c, chunks, size int) (framed, error) {
	total := p.Len()
	lo, hi := min(c*size, total), min((c+1)*size, total)
	lk := linkKey{peer, k.Edge, k.Dir}
	var body []byte
	if s, ok := p.(Slicer); ok && e.split != nil && hi-lo >= 1<<16 {
		var err error
		if body, ok, err = s.Slice(lo, hi-lo); err != nil {
			return framed{}, err
		} else if !ok {
			body = nil
		}
	}
	n := frameHeaderMax + len(e.run)
	if body == nil {
		n += hi - lo
	}
	seq, buf, err := e.reserve(ctx, lk, n)
	if err != nil {
		return framed{}, err
	}
	f := &Frame{Version: FrameVersion, Kind: KindData, Run: e.run, Gen: e.gen, Iter: k.Iter, MB: k.MB, Edge: k.Edge,
		Dir: k.Dir, From: e.stage, Chunk: int32(c), Chunks: int32(chunks), Seq: seq}
	if body != nil {
		return framed{lk: lk, seq: seq, head: appendFrameHeader(buf[:0], f, len(body)), data: body}, nil
	}
	data := appendFrameHeader(buf[:0], f, hi-lo)
	head := len(data)
	data = data[:head+hi-lo]
	if err := p.CopyAt(data[head:], lo); err != nil {
		return framed{}, err
	}
	return framed{lk: lk, seq: seq, data: data}, nil
}

// publish sends a frame and keeps it until it is acknowledged.
func (e *Endpoint) publish(fr framed, subject string) error {
	pend := e.track(fr.lk, fr.seq, subject, fr.data, fr.head)
	err := e.put(pend)
	e.mu.Lock()
	e.unbusy(pend)
	e.mu.Unlock()
	return err
}

// reserve waits for room in link lk's window and takes the link's next
// sequence number and a frame buffer of at least n bytes.
func (e *Endpoint) reserve(ctx context.Context, lk linkKey, n int) (uint64, []byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for len(e.unacked[lk]) >= e.window && e.failure == nil && ctx.Err() == nil {
		e.cond.Wait()
	}
	if err := e.failed(ctx); err != nil {
		return 0, nil, err
	}
	seq := e.nextSeq[lk]
	e.nextSeq[lk]++
	if n <= 1024 { // a split frame's fields: the spare buffers are for payloads
		return seq, make([]byte, n), nil
	}
	for len(e.spare) > 0 {
		b := e.spare[len(e.spare)-1]
		e.spare = e.spare[:len(e.spare)-1]
		if cap(b) >= n {
			return seq, b[:n], nil
		}
	}
	return seq, make([]byte, n), nil
}

// track keeps frame seq of link lk until it is acknowledged, marked busy
// while the caller publishes it.
func (e *Endpoint) track(lk linkKey, seq uint64, subject string, data, head []byte) *pending {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.unacked[lk] == nil {
		e.unacked[lk] = map[uint64]*pending{}
	}
	now := time.Now()
	p := &pending{subject: subject, data: data, head: head, firstAt: now, sentAt: now, busy: 1}
	e.unacked[lk][seq] = p
	e.stats.Sent++
	e.stats.Bytes += int64(len(head) + len(data))
	return p
}

// unbusy ends one publish of p; an acknowledged frame no publish holds
// gives its buffer back for the next frames (e.mu held).
func (e *Endpoint) unbusy(p *pending) {
	p.busy--
	e.recycle(p)
}

// recycle keeps the buffer of an acknowledged frame that no publish holds
// for the next frames, up to a window's worth (e.mu held).
func (e *Endpoint) recycle(p *pending) {
	if !p.acked || p.busy > 0 || p.data == nil || p.head != nil { // a split frame's data is the sender's
		return
	}
	if len(e.spare) < 2*e.window {
		e.spare = append(e.spare, p.data[:0])
	}
	p.data = nil
}

func (e *Endpoint) failed(ctx context.Context) error {
	if e.failure != nil {
		return e.failure
	}
	return ctx.Err()
}

// resender publishes again every frame unacknowledged for too long.
func (e *Endpoint) resender() {
	tick := time.NewTicker(e.resend / 2)
	defer tick.Stop()
	for range tick.C {
		e.mu.Lock()
		if e.failure != nil {
			e.mu.Unlock()
			return
		}
		var again []*pending
		now := time.Now()
		rto := e.rtt.timeout(e.resend)
		for _, m := range e.unacked {
			for _, p := range m {
				wait := max(p.wait, rto)
				if now.Sub(p.sentAt) > wait {
					// each resend of a chunk doubles its wait: a lost chunk is
					// resent soon, a slow link is not flooded
					p.sentAt, p.wait, p.resent = now, min(2*wait, maxResend), true
					p.busy++
					again = append(again, p)
				}
			}
		}
		e.stats.Resent += int64(len(again))
		e.mu.Unlock()
		for _, p := range again {
			e.put(p)
		}
		e.mu.Lock()
		for _, p := range again {
			e.unbusy(p)
		}
		e.mu.Unlock()
	}
}

// put publishes a frame kept until acknowledged: whole, or split.
func (e *Endpoint) put(p *pending) error {
	if p.head != nil {
		return e.split.PublishSplit(p.subject, p.head, p.data)
	}
	return e.t.Publish(p.subject, p.data)
}

// handle takes one frame off the wire.
func (e *Endpoint) handle(data []byte) {
	f, err := DecodeFrame(data)
	if err != nil || f.Run != e.run {
		return // not ours, or not a frame: nothing to train on
	}
	e.accept(f)
}

// handleSplit takes one frame off a split transport: whole (head nil) or
// its fields and payload apart.
func (e *Endpoint) handleSplit(head, body []byte) {
	if head == nil {
		e.handle(body)
		return
	}
	f, err := DecodeFrameSplit(head, body)
	if err != nil || f.Run != e.run {
		return
	}
	e.accept(f)
}

// accept takes a decoded frame in and acknowledges it.
func (e *Endpoint) accept(f *Frame) {
	if ack := e.take(f); ack != nil {
		e.t.Publish(Inbox(e.run, e.gen, f.From), ack)
		e.acks.Done()
	}
}

// take takes one frame in: an acknowledgement ends its frame's wait; a
// data frame is placed, and its acknowledgement returned for the caller to
// publish (counted in e.acks: Close waits for it).
func (e *Endpoint) take(f *Frame) (ack []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if f.Gen != e.gen {
		e.stats.Stale++
		return ack
	}
	if f.Kind == KindAck {
		if m := e.unacked[linkKey{f.From, f.Edge, f.Dir}]; m != nil {
			if p := m[f.Seq]; p != nil {
				if !p.resent { // Karn: a resent chunk's ack times nothing
					e.rtt.add(time.Since(p.firstAt))
				}
				p.acked = true
				e.recycle(p)
			}
			delete(m, f.Seq)
			e.cond.Broadcast()
		}
		return nil
	}
	ack = e.ack(f)
	if f.Iter < e.floor {
		e.stats.Stale++
		return ack
	}
	k := Key{f.Iter, f.MB, f.Edge, f.Dir}
	a := e.chunks[k]
	if e.taken[k] || e.got[k] != nil || a != nil && (a.chunks != int(f.Chunks) || a.have[f.Chunk]) {
		e.stats.Duplicates++
		return ack
	}
	if f.Chunks == 1 {
		e.deliver(k, f.Payload)
		return ack
	}
	if a == nil {
		a = &assembly{chunks: int(f.Chunks), have: make([]bool, f.Chunks), alloc: e.buffer}
		e.chunks[k] = a
	}
	if !a.add(int(f.Chunk), f.Payload) {
		e.stats.Stale++ // a chunk that does not fit its message: no sender of ours makes one
		return ack
	}
	if a.n == a.chunks {
		delete(e.chunks, k)
		e.deliver(k, a.whole())
		return ack
	}
	e.stats.Received++
	return ack
}

// maxKept and maxKeptN bound the messages kept for reuse (Recycle).
const (
	maxKept  = 1 << 30 // bytes
	maxKeptN = 64
)

// Recycle gives back a message Receive returned, which nothing reads any
// more (nor any tensor decoded in place from it): its memory assembles a
// later message of its size, without a new allocation to clear and fault
// in. The oldest kept go to the collector first.
func (e *Endpoint) Recycle(msg []byte) {
	if cap(msg) < 1<<16 { // a small message costs little to make anew
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.kept = append(e.kept, msg[:0])
	e.keptN += cap(msg)
	for len(e.kept) > maxKeptN || e.keptN > maxKept {
		e.keptN -= cap(e.kept[0])
		e.kept[0] = nil
		e.kept = e.kept[1:]
	}
}

// buffer is n bytes to assemble a message in: a recycled message's
// memory of that size where there is one (e.mu held).
func (e *Endpoint) buffer(n int) []byte {
	for i, k := range e.kept {
		if cap(k) == n {
			e.kept = append(e.kept[:i], e.kept[i+1:]...)
			e.keptN -= n
			return k[:n]
		}
	}
	return make([]byte, n)
}

// deliver keeps a whole message for Receive (e.mu held).
func (e *Endpoint) deliver(k Key, msg []byte) {
	e.stats.Received++
	e.got[k] = msg
	e.cond.Broadcast()
}

// maxMessage bounds what a message's chunks may declare: a frame cannot
// make its receiver allocate more.
const maxMessage = 1 << 36

// assembly is a message arriving in chunks, copied into one buffer as they
// come: every chunk but the last has the sender's chunk size, so each has
// its place as soon as one of them has arrived (the last, when it comes
// first, waits for that).
type assembly struct {
	chunks int
	have   []bool
	n      int    // chunks in
	size   int    // bytes of every chunk but the last; 0 until one came
	buf    []byte // chunks·size bytes once size is known
	last   []byte // the last chunk, held while size is unknown
	tail   int    // the last chunk's bytes
	alloc  func(n int) []byte
}

// add places chunk c; false: it does not fit the chunks before it.
func (a *assembly) add(c int, p []byte) bool {
	if c == a.chunks-1 {
		if a.size == 0 {
			a.last = p
		} else if len(p) > a.size {
			return false
		} else {
			copy(a.buf[c*a.size:], p)
		}
		a.tail = len(p)
	} else {
		if a.size == 0 {
			if len(p) == 0 || uint64(len(p))*uint64(a.chunks) > maxMessage || a.last != nil && len(a.last) > len(p) {
				return false
			}
			a.size = len(p)
			if a.alloc != nil {
				a.buf = a.alloc(a.chunks * a.size)
			} else {
				a.buf = make([]byte, a.chunks*a.size)
			}
			if a.last != nil {
				copy(a.buf[(a.chunks-1)*a.size:], a.last)
				a.last = nil
			}
		} else if len(p) != a.size {
			return false
		}
		copy(a.buf[c*a.size:], p)
	}
	a.have[c] = true
	a.n++
	return true
}

// whole is the message once every chunk is in.
func (a *assembly) whole() []byte { return a.buf[:(a.chunks-1)*a.size+a.tail] }

// ack is the acknowledgement of a data frame (again, if it is a
// duplicate) to its sender, nil once the endpoint is closed (e.mu held).
func (e *Endpoint) ack(f *Frame) []byte {
	if e.failure != nil { // closed: Close may be waiting on acks
		return nil
	}
	a := &Frame{Version: FrameVersion, Kind: KindAck, Run: e.run, Gen: e.gen, Iter: f.Iter, MB: f.MB, Edge: f.Edge,
		Dir: f.Dir, From: e.stage, Chunk: 0, Chunks: 0, Seq: f.Seq}
	e.acks.Add(1)
	return appendFrameHeader(make([]byte, 0, frameHeaderMax+len(e.run)), a, 0)
}

// Receive waits for a whole message and takes it.
func (e *Endpoint) Receive(ctx context.Context, k Key) ([]byte, error) {
	defer e.wakeOn(ctx)()
	e.mu.Lock()
	defer e.mu.Unlock()
	for e.got[k] == nil {
		if err := e.failed(ctx); err != nil {
			return nil, fmt.Errorf("waiting for iteration %d micro-batch %d edge %d %c: %w", k.Iter, k.MB, k.Edge, k.Dir, err)
		}
		e.cond.Wait()
	}
	msg := e.got[k]
	delete(e.got, k)
	e.taken[k] = true
	return msg, nil
}

// TryReceive takes a whole message of key k if it is there, without
// waiting for one.
func (e *Endpoint) TryReceive(k Key) ([]byte, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	msg := e.got[k]
	if msg == nil {
		return nil, false
	}
	delete(e.got, k)
	e.taken[k] = true
	return msg, true
}

// Forget drops the bookkeeping of iterations before iter.
func (e *Endpoint) Forget(iter int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.floor = max(e.floor, iter)
	for k := range e.taken {
		if k.Iter < iter {
			delete(e.taken, k)
		}
	}
}

// ReceiveAny waits for any whole message of the given edge, direction and
// micro-batch field (control traffic, whose senders are not known in
// advance) and takes it.
func (e *Endpoint) ReceiveAny(ctx context.Context, edge int32, dir uint8, mb int32) (Key, []byte, error) {
	defer e.wakeOn(ctx)()
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		for k, msg := range e.got {
			if k.Edge == edge && k.Dir == dir && k.MB == mb {
				delete(e.got, k)
				e.taken[k] = true
				return k, msg, nil
			}
		}
		if err := e.failed(ctx); err != nil {
			return Key{}, nil, err
		}
		e.cond.Wait()
	}
}

// Drain waits until every frame sent has been acknowledged, so that a worker
// leaving does not take undelivered messages with it.
func (e *Endpoint) Drain(ctx context.Context) error {
	defer e.wakeOn(ctx)()
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		open := 0
		for _, m := range e.unacked {
			open += len(m)
		}
		if open == 0 {
			return nil
		}
		if err := e.failed(ctx); err != nil {
			return err
		}
		e.cond.Wait()
	}
}

// SendActivation and ReceiveActivation move one message of micro-batch mb of
// iteration iter on edge 0, for benchmarks of the links themselves.
func (e *Endpoint) SendActivation(ctx context.Context, peer int32, iter int64, mb int32, payload []byte) error {
	return e.Send(ctx, peer, Key{iter, mb, 0, 'a'}, payload)
}

func (e *Endpoint) ReceiveActivation(ctx context.Context, iter int64, mb int32) ([]byte, error) {
	return e.Receive(ctx, Key{iter, mb, 0, 'a'})
}

// wakeOn wakes everything waiting on the endpoint when ctx ends; the caller
// defers the returned stop.
func (e *Endpoint) wakeOn(ctx context.Context) func() bool {
	return context.AfterFunc(ctx, func() {
		e.mu.Lock()
		e.cond.Broadcast()
		e.mu.Unlock()
	})
}
