package runtime

import (
	"context"
	"sync"
	"time"

	"github.com/graphpipe/graphpipe/runtime/wire"
)

// sender sends a worker's messages to its peers in the order they are
// queued, on a goroutine of its own, so that the worker's compute runs
// ahead of its sends: a Send action queues its message and the worker goes
// on to its next action while the frames go out. A small message in host
// memory with nothing queued before it goes out at once from the worker's
// goroutine instead (inlineBytes). What a queued message reads (a stage's
// output, a staging buffer) must stay unchanged until it is sent: the
// worker waits for a micro-batch's sends (wait) before the passes that
// release it, and for all of them (drain) before its step.
type sender struct {
	ep   *wire.Endpoint
	jobs chan *sendJob

	mu   sync.Mutex // guards open, err
	cond *sync.Cond
	open map[int]int // per micro-batch, its messages queued and not yet sent
	err  error       // the first send that failed
}

// sendJob is one message to send: p, keyed k, to peer, for micro-batch mb.
type sendJob struct {
	ctx  context.Context
	mb   int
	peer int32
	k    wire.Key
	p    wire.Payload
	// send, when set, sends it instead of the endpoint's SendPayload (an
	// IPC handle that waits for its copy's acknowledgement)
	send func(ctx context.Context) error
	// done, when set, hears how it went and how long it took
	done func(err error, secs float64)
	// host: p lies in host memory already (no download to wait for), so
	// that it may go out from the worker's goroutine (inlineBytes)
	host bool
}

func newSender(ep *wire.Endpoint) *sender {
	s := &sender{ep: ep, jobs: make(chan *sendJob, 1024), open: map[int]int{}}
	s.cond = sync.NewCond(&s.mu)
	go s.run()
	return s
}

func (s *sender) run() {
	for j := range s.jobs {
		s.do(j)
	}
}

// do sends j and counts it sent; its error is the send's.
func (s *sender) do(j *sendJob) error {
	start := time.Now()
	var err error
	if j.send != nil {
		err = j.send(j.ctx)
	} else {
		err = s.ep.SendPayload(j.ctx, j.peer, j.k, j.p)
	}
	if j.done != nil {
		j.done(err, time.Since(start).Seconds())
	}
	s.mu.Lock()
	if s.open[j.mb]--; s.open[j.mb] == 0 {
		delete(s.open, j.mb)
	}
	if err != nil && s.err == nil {
		s.err = err
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	return err
}

// queue sends j after the messages queued before it; a send that failed
// before is its error.
func (s *sender) queue(j *sendJob) error {
	s.mu.Lock()
	if s.err != nil {
		defer s.mu.Unlock()
		return s.err
	}
	inline := len(s.open) == 0 && j.host && j.send == nil && j.p.Len() < inlineBytes
	s.open[j.mb]++
	s.mu.Unlock()
	if inline {
		return s.do(j)
	}
	s.jobs <- j
	return nil
}

// inlineBytes bounds what a message may hold to be sent by the worker's own
// goroutine when nothing is queued before it: a sender goroutine would wait
// for a processor the compute holds (a worker with one core: until the
// compute next waits), and a larger message may be lent to the transport
// and wait for its acknowledgement (wire's split frames).
const inlineBytes = 64 << 10

// wait waits until micro-batch mb's messages are sent, or ctx ends.
func (s *sender) wait(ctx context.Context, mb int) error {
	return s.until(ctx, func() bool { return s.open[mb] == 0 })
}

// drain waits until every message queued is sent, or ctx ends.
func (s *sender) drain(ctx context.Context) error {
	return s.until(ctx, func() bool { return len(s.open) == 0 })
}

func (s *sender) until(ctx context.Context, done func() bool) error {
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for !done() && s.err == nil && ctx.Err() == nil {
		s.cond.Wait()
	}
	if s.err != nil {
		return s.err
	}
	return ctx.Err()
}

// close ends the sender's goroutine once what is queued is sent.
func (s *sender) close() { close(s.jobs) }
