package natscluster

import (
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestClusterRoutesMessages: a message published on node 3 reaches a
// subscriber on node 1 through the routes; a killed node takes its clients
// with it and comes back on its ports with Restart; Clients names who is on
// a node.
func TestClusterRoutesMessages(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 3-node nats-server cluster; make check runs it")
	}
	c := Start(t, Options{})
	sub, err := nats.Connect(c.URL(0), nats.Name("the subscriber"), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	got := make(chan string, 10)
	if _, err := sub.Subscribe("x", func(m *nats.Msg) { got <- string(m.Data) }); err != nil {
		t.Fatal(err)
	}
	sub.Flush()
	if names, err := c.Clients(0); err != nil || !slices.Contains(names, "the subscriber") {
		t.Fatalf("node 1's clients: %v, %v", names, err)
	}
	pub, err := nats.Connect(c.URL(2))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	expect := func(what string) {
		t.Helper()
		// interest crosses the routes a little after the subscription
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
			pub.Publish("x", []byte(what))
			select {
			case m := <-got:
				if m == what {
					return
				}
			case <-time.After(50 * time.Millisecond):
			}
		}
		t.Fatalf("%q never arrived", what)
	}
	expect("through the routes")
	c.Kill(0)
	if _, err := nats.Connect(c.URL(0)); err == nil {
		t.Fatal("a killed node took a connection")
	}
	c.Restart(0)
	expect("after the restart") // the subscriber came back to its node
}

// TestClusterListsSubscriptions: a client's subscription on node 1 is
// listed with the client's name by ClientSubs(0), and by node 1's Subs
// (and no other node's) until the client unsubscribes; Alive follows Kill
// and Restart.
func TestClusterListsSubscriptions(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 3-node nats-server cluster; make check runs it")
	}
	c := Start(t, Options{})
	nc, err := nats.Connect(c.URL(0), nats.Name("lister"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync("graphpipe.r1.hb")
	if err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	held := func() []int {
		var out []int
		for i := range c.Nodes() {
			subs, err := c.Subs(i, "graphpipe.r1.")
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, len(subs))
		}
		return out
	}
	wait := func(want []int) {
		t.Helper()
		var got []int
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if got = held(); slices.Equal(got, want) {
				return
			}
		}
		t.Fatalf("subscriptions per node %v, want %v", got, want)
	}
	wait([]int{1, 0, 0})
	clients, err := c.ClientSubs(0)
	if err != nil || len(clients) != 1 || clients[0].Name != "lister" || !slices.Equal(clients[0].Subs, []string{"graphpipe.r1.hb"}) {
		t.Fatalf("node 1's clients %+v, %v", clients, err)
	}
	sub.Unsubscribe()
	nc.Flush()
	wait([]int{0, 0, 0})
	c.Kill(1)
	if c.Alive(1) || !c.Alive(0) {
		t.Fatal("Alive does not follow Kill")
	}
	c.Restart(1)
	if !c.Alive(1) {
		t.Fatal("Alive does not follow Restart")
	}
}
