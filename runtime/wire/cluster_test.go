package wire_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/internal/natscluster"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/runtime/wire/wiretest"
)

// TestLinksSurviveANodeKill: a sender and a receiver on a real 3-node
// cluster (Debian's nats-server), each given every node's URL; the node of
// one of them is killed while 200 messages stream between them. That client
// reconnects to another node, its subscription comes back with it, the links
// resend what was lost, and the receiver takes each message once, in order,
// with its own payload, and nothing more.
func TestLinksSurviveANodeKill(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 3-node nats-server cluster losing a node; make check runs it")
	}
	for _, victim := range []string{"sender", "receiver"} {
		t.Run(victim, func(t *testing.T) {
			c := natscluster.Start(t, natscluster.Options{})
			na, ra := wiretest.DialCluster(t, c, "sender")
			nb, rb := wiretest.DialCluster(t, c, "receiver")
			run := "kill-" + victim
			a, err := wire.NewEndpoint(na, run, 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := wire.NewEndpoint(nb, run, 1, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			kill, moved := wiretest.NodeOf(t, c, na), ra
			if victim == "receiver" {
				kill, moved = wiretest.NodeOf(t, c, nb), rb
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			const n = 200
			sent := make(chan error, 1)
			go func() {
				for i := 0; i < n; i++ {
					if i == n/4 {
						c.Kill(kill)
					}
					if err := a.SendActivation(ctx, 1, int64(i), 0, []byte(fmt.Sprint("message ", i))); err != nil {
						sent <- err
						return
					}
				}
				sent <- a.Drain(ctx)
			}()
			for i := 0; i < n; i++ {
				msg, err := b.ReceiveActivation(ctx, int64(i), 0)
				if err != nil {
					t.Fatalf("message %d: %v (receiver's stats %+v)", i, err, b.Stats())
				}
				if want := fmt.Sprint("message ", i); string(msg) != want {
					t.Fatalf("message %d is %q", i, msg)
				}
			}
			if err := <-sent; err != nil {
				t.Fatalf("sender: %v", err)
			}
			urls := moved.List()
			if len(urls) == 0 || urls[len(urls)-1] == c.URL(kill) {
				t.Fatalf("the %s's reconnections: %v; its node was %s", victim, urls, c.URL(kill))
			}
			st := b.Stats()
			if st.Received != n {
				t.Errorf("received %d frames, want %d (stats %+v)", st.Received, n, st)
			}
			short, cancelShort := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancelShort()
			if k, _, err := b.ReceiveAny(short, 0, 'a', 0); err == nil {
				t.Errorf("a message beyond the %d sent: %+v", n, k)
			}
			t.Logf("%s moved to %v; sender resent %d frames, receiver dropped %d duplicates", victim, urls, a.Stats().Resent, st.Duplicates)
		})
	}
}

// TestResentFrameAfterReconnectIsDropped: a receiver takes a frame, its
// node is killed, it reconnects to another; the same frame sent again (a
// resend whose acknowledgement was lost with the node) is acknowledged
// and counted as a duplicate, not delivered twice, while a new one is.
func TestResentFrameAfterReconnectIsDropped(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 3-node nats-server cluster; make check runs it")
	}
	c := natscluster.Start(t, natscluster.Options{})
	nb, moved := wiretest.DialCluster(t, c, "receiver")
	b, err := wire.NewEndpoint(nb, "resent", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	home := wiretest.NodeOf(t, c, nb)
	sender, err := wire.DialNATS(wire.NATSOptions{URL: c.URL((home + 1) % 3)}) // stays up
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close()
	frame := func(iter int64, seq uint64) []byte {
		data, err := wire.EncodeFrame(&wire.Frame{Version: wire.FrameVersion, Kind: wire.KindData, Run: "resent", Gen: 1, Iter: iter, Edge: 0, Dir: 'a',
			From: 0, Chunks: 1, Seq: seq, Payload: []byte(fmt.Sprint("iteration ", iter))})
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// until it is heard: interest crosses the routes a little after the subscription
	deliver := func(iter int64, seq uint64) {
		t.Helper()
		for {
			sender.Publish(wire.Inbox("resent", 1, 1), frame(iter, seq))
			short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
			msg, err := b.ReceiveActivation(short, iter, 0)
			stop()
			if err == nil {
				if want := fmt.Sprint("iteration ", iter); string(msg) != want {
					t.Fatalf("got %q, want %q", msg, want)
				}
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("iteration %d never arrived", iter)
			}
		}
	}
	deliver(1, 0)
	c.Kill(home)
	dups := b.Stats().Duplicates
	for b.Stats().Duplicates == dups { // the resend, after the receiver moved
		sender.Publish(wire.Inbox("resent", 1, 1), frame(1, 0))
		time.Sleep(20 * time.Millisecond)
		if ctx.Err() != nil {
			t.Fatalf("the resent frame never reached the receiver (it moved to %v)", moved.List())
		}
	}
	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stop()
	if k, _, err := b.ReceiveAny(short, 0, 'a', 0); err == nil {
		t.Fatalf("the resent frame was delivered again: %+v", k)
	}
	deliver(2, 1)
	if len(moved.List()) == 0 {
		t.Fatal("the receiver never reconnected")
	}
}
