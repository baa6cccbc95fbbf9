package search

import (
	"sort"

	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/plan"
)

// contention is, per stage of p, the slowdown its compute meets in the
// simulated iteration res: at each moment one of its passes runs, its
// profile's slowdown for the workers then computing on its node (a stage
// counts its devices there), weighted by how long that moment lasts. A
// stage on several nodes takes the most of them; one that computed nothing
// gets 1.
//
// The count is at least the node's workers or its cores, whichever is
// fewer (hostFloor): each worker has a fixed share of the cores for the
// whole run (GOMAXPROCS cores/workers), so one computing alone does not
// run faster for the others' waiting. Averaging the slowdown over the
// timeline, rather than taking it at the average count, prices the
// moments when more workers compute than there are cores: a slowdown
// grows faster than the count beyond the cores (three workers on two
// cores that are busy at once two thirds of the time each run at ×1.5
// throughout, not at the ×1 of two busy on average).
func contention(p *plan.Plan, res *microbatch.Result, cm *costModel) []float64 {
	out := make([]float64, len(p.Stages))
	devs := make([]plan.Device, len(p.Stages))
	for s := range p.Stages {
		devs[s] = cm.kind(p.KindOf(s)).dev
		out[s] = 1
	}
	for _, n := range nodesOf(p) {
		for s, f := range nodeContention(p, res, devs, n) {
			out[s] = max(out[s], f)
		}
	}
	return out
}

// nodesOf is the nodes p's stages run on, in order.
func nodesOf(p *plan.Plan) []int {
	seen := map[int]bool{}
	var out []int
	for _, st := range p.Stages {
		for _, d := range st.Devices {
			if n := node(p, d); !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	sort.Ints(out)
	return out
}

// busyEdge is a change in a node's computing workers: at t, d more (a
// pass of stage s begins) or fewer (it ends).
type busyEdge struct {
	t    float64
	d, s int
}

// nodeContention is contention on node n alone, for the stages with
// devices on it (the others are left out of the map).
func nodeContention(p *plan.Plan, res *microbatch.Result, devs []plan.Device, n int) map[int]float64 {
	here := make([]int, len(p.Stages)) // per stage, its devices on n
	workers := 0
	for s, st := range p.Stages {
		for _, d := range st.Devices {
			if node(p, d) == n {
				here[s]++
			}
		}
		workers += here[s]
	}
	var edges []busyEdge
	for _, e := range res.Events {
		if e.Compute() && e.Stage < len(here) && here[e.Stage] > 0 && e.End > e.Start {
			edges = append(edges, busyEdge{e.Start, here[e.Stage], e.Stage}, busyEdge{e.End, -here[e.Stage], e.Stage})
		}
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].t != edges[j].t {
			return edges[i].t < edges[j].t
		}
		return edges[i].d < edges[j].d // ends before starts at one moment
	})
	weighted, spent := map[int]float64{}, map[int]float64{}
	active := make([]int, len(p.Stages)) // per stage, its passes running
	k := 0
	for i, e := range edges {
		if i > 0 && e.t > edges[i-1].t {
			dt := e.t - edges[i-1].t
			for s, a := range active {
				if a > 0 {
					weighted[s] += dt * devs[s].Slowdown(max(k, hostFloor(devs[s], workers)))
					spent[s] += dt
				}
			}
		}
		k += e.d
		if e.d > 0 {
			active[e.s]++
		} else {
			active[e.s]--
		}
	}
	out := map[int]float64{}
	for s, t := range spent {
		out[s] = weighted[s] / t
	}
	return out
}

// hostFloor is the fewest workers a node of workers workers on d prices
// as computing at once: its workers or its cores, whichever is fewer (a
// worker's share of the cores is fixed for the run); 1 where d measured no
// host (a GPU time-sliced among its workers runs one alone at full speed).
func hostFloor(d plan.Device, workers int) int {
	if d.HostCores <= 0 {
		return 1
	}
	return min(workers, d.HostCores)
}
