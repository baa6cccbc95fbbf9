package search

import (
	"math"
	"testing"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/partition"
	"github.com/graphpipe/graphpipe/plan"
)

// slowCPU is the cpu profile made twice as slow: a second kind of CPU.
func slowCPU() plan.Device {
	d := plan.Profiles["cpu"]
	d.Name, d.PeakFLOPs, d.MemBW = "cpu-slow", d.PeakFLOPs/2, d.MemBW/2
	return d
}

// kindsCase is a small DAG on a small cluster of several kinds.
type kindsCase struct {
	oracleCase
	cluster *plan.Cluster
}

func kindsCases(t *testing.T) []kindsCase {
	clusters := [][]plan.Kind{
		{{Device: plan.Profiles["v100"], Devices: 1, DevicesPerNode: 1}, {Device: plan.Profiles["a100"], Devices: 1, DevicesPerNode: 1}},
		{{Device: plan.Profiles["v100"], Devices: 2, DevicesPerNode: 1}, {Device: plan.Profiles["a100"], Devices: 1, DevicesPerNode: 1}},
		{{Device: plan.Profiles["cpu"], Devices: 1, DevicesPerNode: 1}, {Device: slowCPU(), Devices: 2, DevicesPerNode: 1}},
		{{Device: plan.Profiles["h100"], Devices: 1, DevicesPerNode: 1}, {Device: plan.Profiles["v100"], Devices: 1, DevicesPerNode: 1}, {Device: plan.Profiles["a100"], Devices: 1, DevicesPerNode: 1}},
	}
	var cases []kindsCase
	for seed := int64(0); seed < 160; seed++ {
		n := 2 + int(seed%6) // 2..7 ops
		g, err := models.RandomDAG(seed, n, 64)
		if err != nil {
			t.Fatal(err)
		}
		c := &plan.Cluster{Kinds: append([]plan.Kind(nil), clusters[seed%int64(len(clusters))]...)}
		var static int64
		for i := 0; i < g.NumOps(); i++ {
			static += g.Cost(i).Params * 16
		}
		for i := range c.Kinds { // squeeze memory on some cases, unevenly, so that the kinds differ in what fits
			switch k := &c.Kinds[i]; seed % 3 {
			case 1:
				k.Device.Memory = static/int64(c.Total()) + int64(i+1)<<19 + 1
			case 2:
				k.Device.Memory = static/2 + int64(i+1)<<18
			}
		}
		o, err := Options{Cluster: c, Batch: 16}.withDefaults(16)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, kindsCase{oracleCase{g: g, o: o, b: 4, mbs: 4, seed: seed, ops: n, k: c.Total()}, o.Cluster})
	}
	return cases
}

// kindModels are a cost model per kind of the case's cluster.
func kindModels(tc kindsCase) []*costModel {
	var cms []*costModel
	for _, k := range tc.cluster.Kinds {
		ko := tc.o.kindAlone(k)
		ko.Devices = tc.o.Devices
		cms = append(cms, newCostModel(tc.g, &ko))
	}
	cms[0].kinds = cms
	return cms
}

// kindValues is the best binding time of a plan of the DP's space over
// every assignment of kinds to its stages that uses each kind's devices
// exactly (+Inf: none fits).
func kindValues(cms []*costModel, c *plan.Cluster, stages []bfStage, b int64, mbs int, cross func([]int) (int64, int64)) float64 {
	left := make([]int, len(c.Kinds))
	for t, k := range c.Kinds {
		left[t] = k.Devices
	}
	best := math.Inf(1)
	var assign func(i int, worst float64)
	assign = func(i int, worst float64) {
		if worst >= best {
			return
		}
		if i == len(stages) {
			for _, l := range left {
				if l != 0 {
					return
				}
			}
			best = worst
			return
		}
		s := stages[i]
		for t, cm := range cms {
			if left[t] < s.k || int64(s.k) > b {
				continue
			}
			cost := cm.priceOps(s.ops, cm.newBlock(s.ops, cross), s.k, b, mbs)
			inflight := min(mbs, s.depth)
			if cost.memory(inflight) > cm.limit || cost.memory(1) > cm.limit {
				continue
			}
			left[t] -= s.k
			assign(i+1, math.Max(worst, math.Max(cost.period, cost.link)))
			left[t] += s.k
		}
	}
	assign(0, 0)
	return best
}

// TestKindsEqualBruteForce: on small DAGs and small clusters of two and
// three kinds, the DP's least bottleneck over every device, each stage of
// one kind, equals an enumeration of every plan of its space with every
// assignment of kinds to stages; and the stages it extracts use each
// kind's devices exactly, at that bottleneck.
func TestKindsEqualBruteForce(t *testing.T) {
	feasible, mixed := 0, 0
	for _, tc := range kindsCases(t) {
		cms := kindModels(tc)
		tree := partition.Decompose(tc.g, 0)
		sp := newSpace(cms[0], tree.Root, cms[0].boundary)
		var devices []int
		for _, k := range tc.cluster.Kinds {
			devices = append(devices, k.Devices)
		}
		d := &dp{prices: newKindPrices(cms, devices, sp, tc.b, tc.mbs, false)}
		got, ok := d.minT(d.devs.full)
		if !ok {
			got = math.Inf(1)
		}
		want := math.Inf(1)
		for _, p := range treePlans(sp.root, tc.k) {
			want = math.Min(want, kindValues(cms, tc.cluster, p, tc.b, tc.mbs, cms[0].boundary))
		}
		if !close(got, want) {
			t.Fatalf("seed %d (%d ops, cluster %v): DP %v, brute force %v", tc.seed, tc.ops, devices, got, want)
		}
		if !ok {
			continue
		}
		feasible++
		used := make([]int, len(devices))
		for _, a := range d.extract(sp.root, d.devs.full) {
			kind, n := d.devs.part(a.k)
			used[kind] += n * d.devs.g[kind]
			c := d.cost(a)
			if T := math.Max(c.period, c.link); T > got*(1+1e-9) {
				t.Errorf("seed %d: a stage of kind %d on %d takes %v, over the DP's %v", tc.seed, kind, n, T, got)
			}
		}
		kinds := map[int]bool{}
		for _, a := range d.extract(sp.root, d.devs.full) {
			kind, _ := d.devs.part(a.k)
			kinds[kind] = true
		}
		if len(kinds) > 1 {
			mixed++
		}
		for k, n := range used {
			if n != devices[k] {
				t.Errorf("seed %d: the plan uses %v devices of each kind, the cluster has %v", tc.seed, used, devices)
				break
			}
		}
	}
	if feasible < 60 || mixed < 10 {
		t.Errorf("%d feasible cases, %d using several kinds: the oracle barely ran", feasible, mixed)
	}
	t.Logf("%d feasible cases, %d of them on several kinds", feasible, mixed)
}
