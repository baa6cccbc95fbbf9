package runtime

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/internal/natscluster"
	"github.com/graphpipe/graphpipe/stage"
)

// dialCluster connects to every node of c, in NATS's random order, and
// records the nodes it moved to.
func dialCluster(t *testing.T, c *natscluster.Cluster, name string) (*NATS, *reconnects) {
	t.Helper()
	r := &reconnects{}
	n, err := DialNATS(NATSOptions{URL: c.URLs(), Name: name, OnReconnect: r.add})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n, r
}

type reconnects struct {
	mu   sync.Mutex // guards urls
	urls []string
}

func (r *reconnects) add(url string) {
	r.mu.Lock()
	r.urls = append(r.urls, url)
	r.mu.Unlock()
}

func (r *reconnects) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.urls...)
}

// nodeOf is the index of the node n is connected to.
func nodeOf(t *testing.T, c *natscluster.Cluster, n *NATS) int {
	t.Helper()
	for i := 0; i < 3; i++ {
		if n.ConnectedURL() == c.URL(i) {
			return i
		}
	}
	t.Fatalf("connected to %q, none of %s", n.ConnectedURL(), c.URLs())
	return -1
}

// TestLinksSurviveANodeKill: a sender and a receiver on a real 3-node
// cluster (Debian's nats-server), each given every node's URL; the node of
// one of them is killed while 200 messages stream between them. That client
// reconnects to another node, its subscription comes back with it, the links
// resend what was lost, and the receiver takes each message once, in order,
// with its own payload, and nothing more.
func TestLinksSurviveANodeKill(t *testing.T) {
	for _, victim := range []string{"sender", "receiver"} {
		t.Run(victim, func(t *testing.T) {
			c := natscluster.Start(t, natscluster.Options{})
			na, ra := dialCluster(t, c, "sender")
			nb, rb := dialCluster(t, c, "receiver")
			run := "kill-" + victim
			a, err := NewEndpoint(na, run, 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := NewEndpoint(nb, run, 1, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			kill, moved := nodeOf(t, c, na), ra
			if victim == "receiver" {
				kill, moved = nodeOf(t, c, nb), rb
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
			urls := moved.list()
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

// TestRunSurvivesANodeKill: the coordinator and the workers of a run share
// one connection to the cluster; its node is killed at the run's 60th
// publish. The client moves to another node and the run ends with the
// parameters of the in-memory run, bit for bit.
func TestRunSurvivesANodeKill(t *testing.T) {
	c := natscluster.Start(t, natscluster.Options{})
	g, plan := smallPlan(t, "mmt", 3, 4)
	o := Options{Train: stage.TrainOptions{Optimizer: "adam", LR: 1e-3}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	want, err := RunLocal(ctx, g, plan, NewMemory(1, Faults{}, 1<<20), "mem", 6, o)
	if err != nil {
		t.Fatal(err)
	}
	nt, moved := dialCluster(t, c, "run")
	node := nodeOf(t, c, nt)
	kt := &killAt{Transport: nt, at: 60, kill: func() { c.Kill(node) }}
	got, err := RunLocal(ctx, g, plan, kt, "killnode", 6, o)
	if err != nil {
		t.Fatal(err)
	}
	if kt.published() < 60 {
		t.Fatalf("the run published %d messages: the node was never killed", kt.published())
	}
	if urls := moved.list(); len(urls) == 0 || strings.Contains(strings.Join(urls, ","), c.URL(node)) {
		t.Fatalf("reconnections %v; the killed node was %s", urls, c.URL(node))
	}
	equalParams(t, got.Params, want.Params, 0)
	t.Logf("killed %s at publish 60 of %d; the client moved to %v", c.URL(node), kt.published(), moved.list())
}

// killAt is a transport that calls kill at its at-th publish.
type killAt struct {
	Transport
	mu   sync.Mutex // guards n
	n    int
	at   int
	kill func()
}

func (k *killAt) Publish(subject string, data []byte) error {
	k.mu.Lock()
	k.n++
	now := k.n == k.at
	k.mu.Unlock()
	if now {
		k.kill()
	}
	return k.Transport.Publish(subject, data)
}

func (k *killAt) published() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.n
}

// TestResentFrameAfterReconnectIsDropped: a receiver takes a frame, its
// node is killed, it reconnects to another; the same frame sent again (a
// resend whose acknowledgement was lost with the node) is acknowledged
// and counted as a duplicate, not delivered twice, while a new one is.
func TestResentFrameAfterReconnectIsDropped(t *testing.T) {
	c := natscluster.Start(t, natscluster.Options{})
	nb, moved := dialCluster(t, c, "receiver")
	b, err := NewEndpoint(nb, "resent", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	home := nodeOf(t, c, nb)
	sender, err := DialNATS(NATSOptions{URL: c.URL((home + 1) % 3)}) // stays up
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close()
	frame := func(iter int64, seq uint64) []byte {
		data, err := EncodeFrame(&Frame{Version: FrameVersion, Kind: KindData, Run: "resent", Gen: 1, Iter: iter, Edge: 0, Dir: 'a',
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
			sender.Publish(Inbox("resent", 1, 1), frame(iter, seq))
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
		sender.Publish(Inbox("resent", 1, 1), frame(1, 0))
		time.Sleep(20 * time.Millisecond)
		if ctx.Err() != nil {
			t.Fatalf("the resent frame never reached the receiver (it moved to %v)", moved.list())
		}
	}
	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stop()
	if k, _, err := b.ReceiveAny(short, 0, 'a', 0); err == nil {
		t.Fatalf("the resent frame was delivered again: %+v", k)
	}
	deliver(2, 1)
	if len(moved.list()) == 0 {
		t.Fatal("the receiver never reconnected")
	}
}
