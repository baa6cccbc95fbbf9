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
