package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/runtime/wire"
)

// TestSenderInlineKeepsOrder: a small message with nothing queued before it
// is sent before queue returns (by the worker's own goroutine), while one
// queued behind a message still on its way waits for it: the sender's order
// holds either way.
func TestSenderInlineKeepsOrder(t *testing.T) {
	ep, err := wire.NewEndpoint(wire.NewMemory(1, wire.Faults{}, 1<<20), "sendertest", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	s := newSender(ep)
	defer s.close()
	ctx := context.Background()
	sent := make(chan string, 3)
	job := func(name string, mb int, bytes int) *sendJob {
		return &sendJob{ctx: ctx, mb: mb, peer: 1, k: wire.Key{Iter: 1, MB: int32(mb)}, p: wire.Bytes(make([]byte, bytes)), host: true,
			done: func(err error, _ float64) {
				if err != nil {
					t.Errorf("%s: %v", name, err)
				}
				sent <- name
			}}
	}

	if err := s.queue(job("small alone", 0, 100)); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-sent:
		if got != "small alone" {
			t.Fatalf("sent %q", got)
		}
	default:
		t.Fatal("a small message with nothing before it was not sent before queue returned")
	}

	release := make(chan struct{})
	slow := job("held", 1, 100)
	slow.send = func(context.Context) error { <-release; return nil } // a send still on its way
	if err := s.queue(slow); err != nil {
		t.Fatal(err)
	}
	if err := s.queue(job("small behind", 1, 100)); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-sent:
		t.Fatalf("%q was sent while the message before it was still on its way", got)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	for _, want := range []string{"held", "small behind"} {
		if got := <-sent; got != want {
			t.Fatalf("sent %q, want %q", got, want)
		}
	}
	if err := s.drain(ctx); err != nil {
		t.Fatal(err)
	}
}
