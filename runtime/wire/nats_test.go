package wire

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// TestLastMessageIsAcknowledged: a receiver that closes its endpoint and its
// connection right after the last message it needs (as the coordinator does
// with the workers' parameters) has acknowledged it: the sender's drain
// ends. The acknowledgement is published from a goroutine; before Close
// waited for it, it could come after the connection closed, and the sender
// waited on it until the coordinator's silence failed the worker.
func TestLastMessageIsAcknowledged(t *testing.T) {
	srv, err := StartEmbedded(0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	dial := func(name string) *NATS {
		nt, err := DialNATS(NATSOptions{URL: srv.URL(), Token: srv.Token, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return nt
	}
	for i := 0; i < 30; i++ {
		run := fmt.Sprintf("last%d", i)
		na, nb := dial("a"), dial("b")
		a, err := NewEndpoint(na, run, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		b, err := NewEndpoint(nb, run, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		k := Key{Iter: 1, Edge: -1, Dir: 'g'} // a control message's edge, as the coordinator's
		if err := a.Send(ctx, 1, k, []byte("params")); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Receive(ctx, k); err != nil {
			t.Fatal(err)
		}
		b.Close()
		nb.Close()
		if err := a.Drain(ctx); err != nil {
			t.Fatalf("run %d: the sender's drain: %v", i, err)
		}
		cancel()
		a.Close()
		na.Close()
	}
}

// TestDialWaitsForALateServer: a worker started before its server connects
// once the server is up; with no server it gives up after its wait, and a
// wrong token fails at once instead of waiting.
func TestDialWaitsForALateServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	var srv *server.Server
	started := make(chan error, 1)
	go func() {
		time.Sleep(600 * time.Millisecond)
		var err error
		srv, err = server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, Authorization: "tok", NoLog: true, NoSigs: true})
		if err == nil {
			srv.Start()
		}
		started <- err
	}()
	waited := 0
	n, err := DialNATSWaiting(context.Background(), NATSOptions{URL: url, Token: "tok"}, 20*time.Second, func(error) { waited++ })
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	if err != nil {
		t.Fatalf("no connection once the server was up: %v", err)
	}
	n.Close()
	if waited != 1 {
		t.Errorf("told of the wait %d times, want once", waited)
	}
	start := time.Now()
	if _, err := DialNATSWaiting(context.Background(), NATSOptions{URL: url, Token: "wrong"}, 20*time.Second, nil); err == nil || time.Since(start) > 5*time.Second {
		t.Errorf("a wrong token: %v after %v, want an error at once", err, time.Since(start))
	}
	srv.Shutdown()
	start = time.Now()
	_, err = DialNATSWaiting(context.Background(), NATSOptions{URL: url, Token: "tok"}, 300*time.Millisecond, nil)
	if !errors.Is(err, nats.ErrNoServers) || !strings.Contains(err.Error(), "after waiting 300ms") {
		t.Errorf("no server: got %v, want no servers after waiting 300ms", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 10*time.Second {
		t.Errorf("gave up after %v, want about 300ms", d)
	}
}

// TestPublishWhileReconnecting: with its server gone and the client trying
// to reconnect, a publish is lost, not an error (a link would fail its run
// on an error; it resends a lost frame); once the connection is closed on
// purpose, a publish is an error again.
func TestPublishWhileReconnecting(t *testing.T) {
	srv, err := StartEmbedded(0)
	if err != nil {
		t.Fatal(err)
	}
	lost := make(chan error, 1)
	nt, err := DialNATS(NATSOptions{URL: srv.URL(), Token: srv.Token, OnDisconnect: func(err error) { lost <- err }})
	if err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("the client never heard its server go")
	}
	if st := nt.nc.Status(); st != nats.RECONNECTING {
		t.Fatalf("client status %v, want reconnecting", st)
	}
	for i := 0; i < 3; i++ {
		if err := nt.Publish("graphpipe.x.g1.s0", []byte("frame")); err != nil {
			t.Fatalf("publish %d while reconnecting: %v", i, err)
		}
	}
	nt.Close()
	if err := nt.Publish("graphpipe.x.g1.s0", []byte("frame")); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("publish on a closed connection: %v, want %v", err, nats.ErrConnectionClosed)
	}
}

// TestDialInOrder: with InOrder a client of a two-node list always
// connects to the first node, and moves to the second when the first goes;
// without it, the node is drawn at random (both are seen in 20 dials).
func TestDialInOrder(t *testing.T) {
	var srvs []*Embedded
	for range 2 {
		s, err := StartEmbeddedOn(EmbeddedOptions{NoToken: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Shutdown()
		srvs = append(srvs, s)
	}
	urls := srvs[0].URL() + "," + srvs[1].URL()
	seen := map[string]int{}
	for _, inOrder := range []bool{true, false} {
		for range 20 {
			n, err := DialNATS(NATSOptions{URL: urls, InOrder: inOrder})
			if err != nil {
				t.Fatal(err)
			}
			seen[fmt.Sprint(inOrder, " ", n.ConnectedURL())]++
			n.Close()
		}
	}
	if seen["true "+srvs[0].URL()] != 20 || seen["false "+srvs[0].URL()] == 0 || seen["false "+srvs[1].URL()] == 0 {
		t.Fatalf("connected to %v; want the first node 20 times in order, both at random", seen)
	}
	moved := make(chan string, 1)
	n, err := DialNATS(NATSOptions{URL: urls, InOrder: true, OnReconnect: func(u string) { moved <- u }})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	srvs[0].Shutdown()
	select {
	case u := <-moved:
		if u != srvs[1].URL() {
			t.Fatalf("reconnected to %s, want %s", u, srvs[1].URL())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no reconnection to the second node")
	}
}
