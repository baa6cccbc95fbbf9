package search

import (
	"github.com/graphpipe/graphpipe/plan"
)

// link is how a run moves one stage edge's tensors on a device kind, and
// its price per message: lat + bytes/bw.
type link struct {
	transport string // plan.TransportIPC or plan.TransportNATS
	lat, bw   float64
}

// edgeLink is the link the run will use between two stages on devices d,
// on one node or not (inter): workers on one host whose devices can share
// memory (a GPU) copy device to device through an IPC handle, priced at
// the profile's measured IPC copy where it has one; otherwise the bytes go
// over NATS, priced at the profile's measured NATS path (across nodes, no
// faster than the link between them). A profile that measured neither
// prices as profiles always did: IntraLat/IntraBW inside a node,
// InterLat/InterBW between nodes.
func edgeLink(d plan.Device, inter bool) link {
	if !inter && d.IPCCapable() {
		if d.IPCBW > 0 {
			return link{plan.TransportIPC, d.IPCLat, d.IPCBW}
		}
		return link{plan.TransportIPC, d.IntraLat, d.IntraBW}
	}
	switch {
	case d.NATSBW > 0 && inter:
		return link{plan.TransportNATS, max(d.NATSLat, d.InterLat), min(d.NATSBW, d.InterBW)}
	case d.NATSBW > 0:
		return link{plan.TransportNATS, d.NATSLat, d.NATSBW}
	case inter:
		return link{plan.TransportNATS, d.InterLat, d.InterBW}
	}
	return link{plan.TransportNATS, d.IntraLat, d.IntraBW}
}

// time is one message of bytes over the link (none for no bytes).
func (l link) time(bytes float64) float64 {
	if bytes <= 0 {
		return 0
	}
	return l.lat + bytes/l.bw
}

// ringLink is the link of one step of a stage's ring all-reduce on d: the
// profile's measured ring (across nodes, no faster than the link between
// them), or, unmeasured, the links as profiles always priced it.
func ringLink(d plan.Device, inter bool) (lat, bw float64) {
	switch {
	case d.RingBW > 0 && inter:
		return max(d.RingLat, d.InterLat), min(d.RingBW, d.InterBW)
	case d.RingBW > 0:
		return d.RingLat, d.RingBW
	case inter:
		return d.InterLat, d.InterBW
	}
	return d.IntraLat, d.IntraBW
}

// messageCPU is what a stage's boundary costs it per micro-batch in its own
// time on d: each side that carries bytes (in: the activations it takes
// and the gradients it sends back; out: the activations it sends and the
// gradients it takes) one send and one receive of its largest tensor. Zero
// where the profile measured no message costs.
func messageCPU(d plan.Device, inBytes, outBytes float64) float64 {
	t := 0.0
	for _, b := range []float64{inBytes, outBytes} {
		s, r := d.MessageCPU(b)
		t += s + r
	}
	return t
}
