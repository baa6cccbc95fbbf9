package search

import (
	"math"
	"testing"

	"github.com/graphpipe/graphpipe/plan"
)

// TestEdgeJoinExtra: an edge over NATS between stages on one host of k
// workers takes what the profile's joins measured beyond a join of two
// (NATSJoinS[k-1] − NATSJoinS[1]; past the list its last entry's) on top
// of the NATS path; two workers, an edge between nodes and a profile that
// measured no joins take nothing more.
func TestEdgeJoinExtra(t *testing.T) {
	g := smallMMT(t)
	base := plan.Profiles["cpu"]
	base.RunCosts = plan.RunCosts{NATSLat: 1e-4, NATSBW: 1e8}
	joined := base
	joined.NATSJoinS = plan.NewJoinLatencies(1e-4, 1e-4, 1.6e-4, 2e-4)
	const rows, perSample = 32, 128
	for _, c := range []struct {
		name    string
		dev     plan.Device
		workers int // one stage a device, the last one's taking from every other
		perNode int
		want    float64 // beyond the NATS path
	}{
		{"two workers", joined, 2, 8, 0},
		{"three workers", joined, 3, 8, 6e-5},
		{"four workers", joined, 4, 8, 1e-4},
		{"six workers: the last entry", joined, 6, 8, 1e-4},
		{"three workers, no joins measured", base, 3, 8, 0},
		{"between nodes", joined, 6, 3, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &plan.Plan{Device: c.dev, Devices: c.workers, DevicesPerNode: c.perNode, MicroBatch: rows}
			in := make([]stageIn, c.workers)
			for s := range c.workers {
				p.Stages = append(p.Stages, plan.PlanStage{Devices: []int{s}})
				in[s] = stageIn{k: 1}
				if s > 0 {
					p.Edges = append(p.Edges, plan.PlanEdge{From: s - 1, To: c.workers - 1, Bytes: perSample})
				}
			}
			cm := newCostModel(g, &Options{Device: c.dev, Devices: c.workers, DevicesPerNode: c.perNode})
			const e = 0 // from the first stage to the last
			priceEdge(p, e, in, cm)
			lat, bw := c.dev.NATSLat, c.dev.NATSBW
			if p.Edges[e].Inter != (c.perNode < c.workers) {
				t.Fatalf("between nodes %v, want %v", p.Edges[e].Inter, c.perNode < c.workers)
			}
			if p.Edges[e].Inter {
				lat, bw = max(lat, c.dev.InterLat), min(bw, c.dev.InterBW)
			}
			want := lat + rows*perSample/bw + c.want
			if got := p.Edges[e].Transfer; math.Abs(got-want) > 1e-12 {
				t.Errorf("transfer %.6g s, want %.6g", got, want)
			}
		})
	}
}
