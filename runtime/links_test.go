package runtime

import (
	"math"
	"os"
	"testing"

	"github.com/graphpipe/graphpipe/plan"
)

// TestEdgeTimes: each edge's ends summed over every worker's reports (its
// bytes from the sending ends only; nats if any message took NATS) beside
// the plan's price of it, which is 0 while the profile measured no
// message costs.
func TestEdgeTimes(t *testing.T) {
	data, err := os.ReadFile("../plan/testdata/plans/candle-uno-replicas-6cpu.json")
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.DecodePlan(data)
	if err != nil {
		t.Fatal(err)
	}
	res := &Result{Links: [][]LinkTime{
		{{Edge: 0, Dir: 'a', Send: true, Transport: TransportIPC, Messages: 2, Bytes: 100, Seconds: 0.25}},
		{{Edge: 0, Dir: 'a', Transport: TransportIPC, Messages: 2, Bytes: 100, Seconds: 0.5},
			{Edge: 0, Dir: 'g', Send: true, Transport: TransportNATS, Messages: 2, Bytes: 40, Seconds: 0.125}},
		{{Edge: len(p.Edges), Seconds: 9}}, // no such edge: left out
	}}
	got := EdgeTimes(p, res)
	if len(got) != 1 {
		t.Fatalf("%d edges, want 1: %+v", len(got), got)
	}
	e := got[0]
	if e.Transport != TransportNATS || e.Bytes != 140 || e.Measured != 0.875 || e.Predicted != 0 {
		t.Errorf("edge 0: %+v, want nats, 140 bytes, 0.875 s measured, none predicted", e)
	}
	p.Device.SendS, p.Device.SendBW, p.Device.RecvS = 1e-5, 1e9, 2e-6
	want := p.EdgeSeconds(0)
	if got := EdgeTimes(p, res)[0].Predicted; want <= 0 || math.Abs(got-want) > 1e-15 {
		t.Errorf("predicted %g s, want the plan's %g", got, want)
	}
}
