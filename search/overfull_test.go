package search

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/partition"
	"github.com/graphpipe/graphpipe/plan"
)

// overfullDP is a DP whose overfull bound the test can check: a random DAG
// on many devices at micro-batch b (b small: each stage takes few), or a
// small DAG on a cluster of several kinds.
type overfullDP struct {
	name string
	d    *dp
}

func overfullDPs(t *testing.T) []overfullDP {
	var out []overfullDP
	for seed := int64(0); seed < 12; seed++ {
		g, err := models.RandomDAG(200+seed, 4+int(seed%4)*4, 128)
		if err != nil {
			t.Fatal(err)
		}
		devices := 6 + int(seed%3)*7
		o, err := Options{Device: plan.Profiles["v100"], Devices: devices, Batch: 64}.withDefaults(g.BatchSize())
		if err != nil {
			t.Fatal(err)
		}
		cm := newCostModel(g, &o)
		b := int64(1) << (seed % 3) // a stage takes at most b devices
		for _, sp := range []*space{newSpace(cm, partition.Decompose(g, 0).Root, cm.boundary), chainSpace(g, &o, cm)} {
			out = append(out, overfullDP{fmt.Sprintf("random-%d-b%d", seed, b), &dp{prices: newPrices(cm, sp, devices, b, int(o.Batch/b), false)}})
		}
	}
	for i, tc := range kindsCases(t) {
		if i%8 != 0 {
			continue
		}
		cms := kindModels(tc)
		sp := newSpace(cms[0], partition.Decompose(tc.g, 0).Root, cms[0].boundary)
		var devices []int
		for _, k := range tc.cluster.Kinds {
			devices = append(devices, k.Devices)
		}
		for _, b := range []int64{1, 2} {
			out = append(out, overfullDP{fmt.Sprintf("kinds-%d-b%d", tc.seed, b), &dp{prices: newKindPrices(cms, devices, sp, b, tc.mbs, false)}})
		}
	}
	return out
}

// TestOverfullIsInf: wherever overfull says a set has more devices than
// units i.. of a node can use, the DP without the device bounds (solve,
// suffix, group, and with a tail suffixHost and groupHost) finds nothing
// there, at every T; and a chain's suffix holds at least the stages its
// devices need: on random DAGs with stages of few devices (spp's chains
// among them), and on clusters of several kinds.
func TestOverfullIsInf(t *testing.T) {
	t.Parallel()
	overfull, checked, chains := 0, 0, 0
	for _, c := range overfullDPs(t) {
		d := c.d
		ts := d.candidates()
		for j := 0; j < len(ts); j += max(1, len(ts)/6) {
			for _, T := range []float64{ts[j], ts[len(ts)-1]} {
				d.tu.deviceBounds = false // bounded's too: they share their prices
				d.reset(T)
				bounded := &dp{prices: d.prices}
				bounded.reset(T)
				for _, n := range d.sp.nodes {
					for i := range n.units {
						for k := 1; k < d.devs.n; k++ {
							if n.chain() && !d.devs.overfull(n, i, k) { // a chain holds at least the stages its devices need
								for _, δ := range []int{0, 2} {
									if !reachable(d, k, δ) {
										continue
									}
									v := d.suffix(sub{n, i, k, δ})
									if v < δ+int(d.devs.need[k]) {
										t.Fatalf("%s at T %v: a chain from unit %d on set %d (δ %d) holds %d, fewer than the %d stages its devices need", c.name, T, i, k, δ, v, d.devs.need[k])
									}
									d.tu.deviceBounds = true
									w := bounded.suffix(sub{n, i, k, δ})
									d.tu.deviceBounds = false
									if w != v {
										t.Fatalf("%s at T %v: a chain from unit %d on set %d (δ %d) holds %d with the device bounds, %d without", c.name, T, i, k, δ, w, v)
									}
									chains++
								}
							}
							if !d.devs.overfull(n, i, k) {
								continue
							}
							overfull++
							for _, δ := range []int{0, 1, 2} {
								if !reachable(d, k, δ) {
									continue
								}
								s := sub{n, i, k, δ}
								got := map[string]int{}
								if i == 0 {
									got["solve"] = d.solve(n, k, δ)
								}
								switch n.kind {
								case partition.Series:
									got["suffix"] = d.suffix(s)
								case partition.Parallel:
									got["group"] = d.group(s)
								}
								for _, tl := range d.sp.tails {
									if tl.kid == n {
										got["groupHost"] = min(d.groupHost(s, tl, true), d.groupHost(s, tl, false))
									}
									if tl.kid == n && n.kind == partition.Series {
										got["suffixHost"] = d.suffixHost(s, tl)
									}
								}
								for what, v := range got {
									checked++
									if v < inf {
										t.Fatalf("%s at T %v: %s of node %d from unit %d on set %d (δ %d) is %d, but overfull says it has more devices than it can use", c.name, T, what, n.id, i, k, δ, v)
									}
								}
							}
						}
					}
				}
			}
		}
	}
	if overfull < 100 {
		t.Errorf("only %d overfull subproblems: the test barely ran", overfull)
	}
	t.Logf("%d overfull subproblems, %d values checked; %d chain suffixes", overfull, checked, chains)
}

// TestOverfullSamePlans: the DP with the device bounds (overfull
// subproblems inf at once, a chain's fewest stages) finds the same plans
// as the one without, byte for byte (bisectCases, and clusters of several
// kinds).
func TestOverfullSamePlans(t *testing.T) {
	t.Parallel()
	deviceBounds := func(tu *tuning) *bool { return &tu.deviceBounds }
	samePlansToggled(t, deviceBounds, "with the device bounds")
	for i, tc := range kindsCases(t) {
		if i%10 != 0 {
			continue
		}
		on, off := searchToggled(t, tc.g, Options{Cluster: tc.cluster, Batch: 16}, deviceBounds)
		if !bytes.Equal(on, off) {
			t.Errorf("kinds case %d: the plan with the device bounds differs from the one without:\n%s\n---\n%s", tc.seed, on, off)
		}
	}
}
