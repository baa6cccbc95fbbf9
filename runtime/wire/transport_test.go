package wire_test

import (
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/runtime/wire/wiretest"
)

// TestTransports runs the transport contract (wiretest) on every
// implementation: the in-memory transport, faultless and with every fault,
// and a NATS connection to an embedded server on a random loopback port.
func TestTransports(t *testing.T) {
	t.Run("Memory", func(t *testing.T) {
		wiretest.TestTransport(t, wiretest.Kind{}, func(t *testing.T) wire.Transport {
			return wire.NewMemory(1, wire.Faults{}, 1<<10)
		})
	})
	t.Run("MemoryFaulty", func(t *testing.T) {
		faults := wire.Faults{Drop: 0.2, Duplicate: 0.2, Reorder: 0.2, Delay: 5 * time.Millisecond}
		wiretest.TestTransport(t, wiretest.Kind{Lossy: true}, func(t *testing.T) wire.Transport {
			return wire.NewMemory(2, faults, 1<<10)
		})
	})
	t.Run("NATS", func(t *testing.T) {
		srv, err := wire.StartEmbedded(4096)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Shutdown)
		wiretest.TestTransport(t, wiretest.Kind{}, func(t *testing.T) wire.Transport {
			n, err := wire.DialNATS(wire.NATSOptions{URL: srv.URL(), Token: srv.Token, Name: t.Name()})
			if err != nil {
				t.Fatal(err)
			}
			return n
		})
	})
}
