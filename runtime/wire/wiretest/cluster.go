package wiretest

import (
	"sync"
	"testing"

	"github.com/graphpipe/graphpipe/internal/natscluster"
	"github.com/graphpipe/graphpipe/runtime/wire"
)

// DialCluster connects to every node of c, in NATS's random order; the
// Reconnects it returns record the nodes the connection moved to. The
// connection is closed when the test ends.
func DialCluster(t testing.TB, c *natscluster.Cluster, name string) (*wire.NATS, *Reconnects) {
	t.Helper()
	r := &Reconnects{}
	n, err := wire.DialNATS(wire.NATSOptions{URL: c.URLs(), Name: name, OnReconnect: r.add})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n, r
}

// Reconnects are the nodes a connection moved to, in order.
type Reconnects struct {
	mu   sync.Mutex // guards urls
	urls []string
}

func (r *Reconnects) add(url string) {
	r.mu.Lock()
	r.urls = append(r.urls, url)
	r.mu.Unlock()
}

// List is the nodes' URLs so far.
func (r *Reconnects) List() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.urls...)
}

// NodeOf is the index of the node of c that n is connected to.
func NodeOf(t testing.TB, c *natscluster.Cluster, n *wire.NATS) int {
	t.Helper()
	for i := 0; i < c.Nodes(); i++ {
		if n.ConnectedURL() == c.URL(i) {
			return i
		}
	}
	t.Fatalf("connected to %q, none of %s", n.ConnectedURL(), c.URLs())
	return -1
}
