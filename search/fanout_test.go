package search

import (
	"math"
	"testing"

	"github.com/graphpipe/graphpipe/plan"
)

// TestEdgeFanOut: an edge between stages of kf and kt replicas is priced
// as the run sends it (runtime's peers): each replica a message to every
// replica across that shares its rows, of a micro-batch's rows over
// max(kf, kt); a sender pays for its messages one after another and its
// last lands that much later; a receiver pays for each it takes; and the
// messages on one sender's or receiver's link pass it one after another.
func TestEdgeFanOut(t *testing.T) {
	g := smallMMT(t)
	dev := plan.Profiles["cpu"]
	dev.RunCosts = plan.RunCosts{NATSLat: 1e-4, NATSBW: 1e8, SendS: 3e-5, SendBW: 1e9, RecvS: 5e-6, RecvBW: 2e9}
	cm := newCostModel(g, &Options{Device: dev, Devices: 4, DevicesPerNode: 4})
	const rows, perSample = 32, 128
	for _, c := range []struct {
		from, to      []int
		msgs, out, in int // rows a message; messages a sender sends, a receiver takes
	}{
		{[]int{0}, []int{1}, 32, 1, 1},
		{[]int{0}, []int{1, 2}, 16, 2, 1},
		{[]int{0}, []int{1, 2, 3}, 11, 3, 1},
		{[]int{0, 1}, []int{2}, 16, 1, 2},
		{[]int{0, 1}, []int{2, 3}, 16, 1, 1},
	} {
		p := &plan.Plan{Device: dev, Devices: 4, DevicesPerNode: 4, MicroBatch: rows,
			Stages: []plan.PlanStage{{Devices: c.from}, {Devices: c.to}},
			Edges:  []plan.PlanEdge{{From: 0, To: 1, Bytes: perSample}}}
		priceEdge(p, 0, []stageIn{{k: len(c.from)}, {k: len(c.to)}}, cm)
		bytes := float64(c.msgs * perSample)
		send, recv := dev.SendS+bytes/dev.SendBW, dev.RecvS+bytes/dev.RecvBW
		e := p.Edges[0]
		n := float64(max(c.out, c.in)) // messages on the busier end's link
		want := []float64{dev.NATSLat + n*bytes/dev.NATSBW + float64(c.out-1)*send, float64(c.out) * send, float64(c.in) * recv}
		for j, got := range []float64{e.Transfer, e.SendS, e.RecvS} {
			if math.Abs(got-want[j]) > 1e-12 {
				t.Errorf("%d to %d replicas: transfer, send, receive %.6g %.6g %.6g, want %.6g %.6g %.6g",
					len(c.from), len(c.to), e.Transfer, e.SendS, e.RecvS, want[0], want[1], want[2])
				break
			}
		}
	}
}
