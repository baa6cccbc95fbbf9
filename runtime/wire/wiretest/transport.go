package wiretest

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/runtime/wire"
)

// Kind says what a transport under test promises beyond the contract.
type Kind struct {
	// Lossy: messages may be lost, duplicated, reordered or delayed; the
	// suite publishes again until heard, and forgives duplicates.
	Lossy bool
}

// TestTransport runs the contract suite (doc.go) on transports made by mk,
// a fresh one per subtest.
func TestTransport(t *testing.T, k Kind, mk func(t *testing.T) wire.Transport) {
	for _, c := range []struct {
		name string
		run  func(t *testing.T, k Kind, tr wire.Transport)
	}{
		{"Delivery", testDelivery},
		{"Isolation", testIsolation},
		{"OneAtATime", testOneAtATime},
		{"Unsubscribe", testUnsubscribe},
		{"PayloadLimit", testPayloadLimit},
		{"Close", testClose},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := mk(t)
			t.Cleanup(func() { tr.Close() })
			c.run(t, k, tr)
		})
	}
}

// wait is how long a message is waited for before the suite gives up.
const wait = 10 * time.Second

// inbox collects what a subscription hears.
type inbox struct {
	mu   sync.Mutex // guards msgs
	msgs [][]byte
	cond chan struct{} // signalled (buffered, 1) on every message
}

func newInbox() *inbox { return &inbox{cond: make(chan struct{}, 1)} }

func (in *inbox) add(b []byte) {
	in.mu.Lock()
	in.msgs = append(in.msgs, append([]byte(nil), b...))
	in.mu.Unlock()
	select {
	case in.cond <- struct{}{}:
	default:
	}
}

func (in *inbox) count(want []byte) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	n := 0
	for _, m := range in.msgs {
		if bytes.Equal(m, want) {
			n++
		}
	}
	return n
}

func (in *inbox) all() [][]byte {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([][]byte(nil), in.msgs...)
}

// subscribe subscribes a new inbox to subject.
func subscribe(t *testing.T, tr wire.Transport, subject string) (*inbox, func()) {
	t.Helper()
	in := newInbox()
	unsub, err := tr.Subscribe(subject, in.add)
	if err != nil {
		t.Fatalf("subscribe %s: %v", subject, err)
	}
	return in, unsub
}

// deliver publishes msg on subject until every inbox has heard it (again
// and again on a lossy transport, once on a reliable one).
func deliver(t *testing.T, k Kind, tr wire.Transport, subject string, msg []byte, ins ...*inbox) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for try := 0; ; try++ {
		buf := append([]byte(nil), msg...)
		if try == 0 || k.Lossy {
			if err := tr.Publish(subject, buf); err != nil {
				t.Fatalf("publish %s: %v", subject, err)
			}
		}
		for i := range buf {
			buf[i] ^= 0xff // the publisher reuses its buffer
		}
		heard := 0
		for _, in := range ins {
			if in.count(msg) > 0 {
				heard++
			}
		}
		if heard == len(ins) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d subscribers heard %q within %v", subject, heard, len(ins), msg, wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// settle lets messages in flight land (a lossy transport delays them).
func settle() { time.Sleep(200 * time.Millisecond) }

// testDelivery: every subscriber of a subject hears each message with its
// bytes; a reliable transport delivers each once.
func testDelivery(t *testing.T, k Kind, tr wire.Transport) {
	a, unsubA := subscribe(t, tr, "graphpipe.test.delivery")
	defer unsubA()
	b, unsubB := subscribe(t, tr, "graphpipe.test.delivery")
	defer unsubB()
	msgs := [][]byte{[]byte("first"), {}, {0, 1, 2, 0xff}}
	for _, m := range msgs {
		deliver(t, k, tr, "graphpipe.test.delivery", m, a, b)
	}
	if k.Lossy {
		return
	}
	settle()
	for _, m := range msgs {
		for name, in := range map[string]*inbox{"a": a, "b": b} {
			if n := in.count(m); n != 1 {
				t.Errorf("subscriber %s heard %q %d times, want once", name, m, n)
			}
		}
	}
}

// testIsolation: a subscriber hears nothing of another subject.
func testIsolation(t *testing.T, k Kind, tr wire.Transport) {
	mine, unsub := subscribe(t, tr, "graphpipe.test.mine")
	defer unsub()
	other, unsubOther := subscribe(t, tr, "graphpipe.test.other")
	defer unsubOther()
	deliver(t, k, tr, "graphpipe.test.other", []byte("not yours"), other)
	deliver(t, k, tr, "graphpipe.test.mine", []byte("yours"), mine)
	settle()
	for _, m := range mine.all() {
		if string(m) != "yours" {
			t.Fatalf("a subscriber of graphpipe.test.mine heard %q", m)
		}
	}
}

// testOneAtATime: a subscription's function is never entered twice at once.
func testOneAtATime(t *testing.T, k Kind, tr wire.Transport) {
	var inside, most atomic.Int32
	in := newInbox()
	unsub, err := tr.Subscribe("graphpipe.test.serial", func(b []byte) {
		n := inside.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(time.Millisecond)
		in.add(b)
		inside.Add(-1)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	for i := range 20 {
		if err := tr.Publish("graphpipe.test.serial", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	deliver(t, k, tr, "graphpipe.test.serial", []byte("last"), in)
	if m := most.Load(); m > 1 {
		t.Fatalf("the function ran %d times at once", m)
	}
}

// testUnsubscribe: nothing published after unsubscribe reaches that
// subscription; another on the subject still hears.
func testUnsubscribe(t *testing.T, k Kind, tr wire.Transport) {
	gone, unsub := subscribe(t, tr, "graphpipe.test.unsub")
	stays, unsubStays := subscribe(t, tr, "graphpipe.test.unsub")
	defer unsubStays()
	deliver(t, k, tr, "graphpipe.test.unsub", []byte("before"), gone, stays)
	unsub()
	deliver(t, k, tr, "graphpipe.test.unsub", []byte("after"), stays)
	settle()
	if n := gone.count([]byte("after")); n > 0 {
		t.Fatalf("an unsubscribed function heard a later message %d times", n)
	}
}

// testPayloadLimit: a message of MaxPayload bytes arrives whole; a larger
// one is refused, never cut.
func testPayloadLimit(t *testing.T, k Kind, tr wire.Transport) {
	limit := tr.MaxPayload()
	if limit <= 0 {
		t.Fatalf("MaxPayload %d, want a positive limit", limit)
	}
	in, unsub := subscribe(t, tr, "graphpipe.test.payload")
	defer unsub()
	full := bytes.Repeat([]byte{0xa5}, limit)
	full[0], full[limit-1] = 1, 2
	deliver(t, k, tr, "graphpipe.test.payload", full, in)
	if err := tr.Publish("graphpipe.test.payload", make([]byte, limit+1)); err == nil {
		t.Fatalf("a message of %d bytes, over the limit of %d, was accepted", limit+1, limit)
	}
	settle()
	for _, m := range in.all() {
		if len(m) != limit {
			t.Fatalf("heard a message of %d bytes, want only whole ones of %d", len(m), limit)
		}
	}
}

// testClose: after Close nothing is published, subscribed or delivered,
// and closing again does no harm.
func testClose(t *testing.T, k Kind, tr wire.Transport) {
	in, _ := subscribe(t, tr, "graphpipe.test.close")
	deliver(t, k, tr, "graphpipe.test.close", []byte("open"), in)
	if err := tr.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := tr.Publish("graphpipe.test.close", []byte("closed")); err == nil {
		t.Error("publish after close: no error")
	}
	if _, err := tr.Subscribe("graphpipe.test.close", func([]byte) {}); err == nil {
		t.Error("subscribe after close: no error")
	}
	settle()
	if n := in.count([]byte("closed")); n > 0 {
		t.Errorf("a message published after close was delivered %d times", n)
	}
	if err := tr.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}
