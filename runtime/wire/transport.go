package wire

import (
	"fmt"
	"math/rand"
	"sync"
	"time"
)

// Transport moves byte messages between subjects. Delivery may lose,
// duplicate, reorder and delay messages: the links above it make up for
// that. Every implementation runs wiretest.TestTransport, the contract in
// full.
type Transport interface {
	// Publish sends data, which the caller may reuse once it returns; a
	// message over MaxPayload bytes is refused.
	Publish(subject string, data []byte) error
	// Subscribe calls fn for each message on subject, one at a time.
	Subscribe(subject string, fn func(data []byte)) (unsubscribe func(), err error)
	MaxPayload() int
	// Close ends every subscription; Publish and Subscribe fail after it.
	Close() error
}

// SplitTransport is a Transport that also carries a message as a small
// head beside its body, never joined: the body is copied once, by the
// transport itself, from where it lies. An endpoint sends a frame's payload
// so, from the sender's memory (its fields are the head); its subscription
// hears both kinds, head nil for a message published whole.
type SplitTransport interface {
	Transport
	// Splits says whether the connection carries heads (a NATS server
	// before 2.2 does not).
	Splits() bool
	PublishSplit(subject string, head, body []byte) error
	SubscribeSplit(subject string, fn func(head, body []byte)) (unsubscribe func(), err error)
}

// PayloadError is a message over a transport's payload limit.
type PayloadError struct {
	Subject     string
	Size, Limit int
}

func (e *PayloadError) Error() string {
	return fmt.Sprintf("publish %s: %d bytes, over the payload limit of %d", e.Subject, e.Size, e.Limit)
}

// Faults are what the in-memory transport does wrong, each a probability.
type Faults struct {
	Drop, Duplicate, Reorder float64
	Delay                    time.Duration // up to this much, uniformly
}

// Memory is an in-process transport that misbehaves under a seed.
type Memory struct {
	mu      sync.Mutex // guards subs, rng, held, closed
	subs    map[string][]*memSub
	rng     *rand.Rand
	faults  Faults
	held    map[string][]byte // a message held back to be delivered after the next
	closed  bool
	payload int
}

type memSub struct {
	ch   chan []byte
	done chan struct{}
	once sync.Once // closes done, from Close or from unsubscribing
}

func (s *memSub) stop() { s.once.Do(func() { close(s.done) }) }

// NewMemory makes an in-memory transport with a payload limit in bytes: a
// larger message is refused, as a NATS server refuses it.
func NewMemory(seed int64, faults Faults, maxPayload int) *Memory {
	return &Memory{subs: map[string][]*memSub{}, rng: rand.New(rand.NewSource(seed)), faults: faults,
		held: map[string][]byte{}, payload: maxPayload}
}

func (m *Memory) MaxPayload() int { return m.payload }

func (m *Memory) Publish(subject string, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errClosed
	}
	if len(data) > m.payload {
		return &PayloadError{Subject: subject, Size: len(data), Limit: m.payload}
	}
	msg := append([]byte(nil), data...)
	f := m.faults
	var out [][]byte
	switch r := m.rng.Float64(); {
	case r < f.Drop:
	case r < f.Drop+f.Duplicate:
		out = [][]byte{msg, msg}
	case r < f.Drop+f.Duplicate+f.Reorder && m.held[subject] == nil:
		m.held[subject] = msg // goes out after the next message on this subject
	default:
		out = [][]byte{msg}
	}
	if h := m.held[subject]; h != nil && len(out) > 0 {
		out = append(out, h)
		delete(m.held, subject)
	}
	for _, s := range m.subs[subject] {
		for _, o := range out {
			delay := time.Duration(0)
			if f.Delay > 0 {
				delay = time.Duration(m.rng.Int63n(int64(f.Delay)))
			}
			go s.deliver(o, delay)
		}
	}
	return nil
}

func (s *memSub) deliver(msg []byte, delay time.Duration) {
	if delay > 0 {
		time.Sleep(delay)
	}
	select {
	case s.ch <- msg:
	case <-s.done:
	}
}

func (m *Memory) Subscribe(subject string, fn func([]byte)) (func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errClosed
	}
	s := &memSub{ch: make(chan []byte), done: make(chan struct{})}
	m.subs[subject] = append(m.subs[subject], s)
	go func() {
		for {
			select {
			case msg := <-s.ch:
				fn(msg)
			case <-s.done:
				return
			}
		}
	}()
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		list := m.subs[subject]
		for i, x := range list {
			if x == s {
				m.subs[subject] = append(list[:i], list[i+1:]...)
				break
			}
		}
		s.stop()
	}, nil
}

func (m *Memory) Close() error {
	m.mu.Lock()
	subs := m.subs
	m.subs, m.closed = map[string][]*memSub{}, true
	m.mu.Unlock()
	for _, list := range subs {
		for _, s := range list {
			s.stop()
		}
	}
	return nil
}

type closedError struct{}

func (closedError) Error() string { return "transport is closed" }

var errClosed = closedError{}
