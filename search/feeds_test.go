package search

import (
	"testing"

	"github.com/graphpipe/graphpipe/partition"
)

// TestFeedsAreTailFree: groupHost with no tail left to place gives the same
// value under every tail, on every parallel node, set of devices and δ, at
// several T (the DP computing each tail's table on its own, as without
// shareFeeds); and the shared table gives that value.
func TestFeedsAreTailFree(t *testing.T) {
	t.Parallel()
	checked := 0
	for _, c := range overfullDPs(t) {
		d := c.d
		if len(d.sp.tails) < 2 {
			continue
		}
		ts := d.candidates()
		for j := 0; j < len(ts); j += max(1, len(ts)/4) {
			d.tu.shareFeeds = false // shared's too: they share their prices
			d.reset(ts[j])
			shared := &dp{prices: d.prices}
			shared.reset(ts[j])
			for _, n := range d.sp.nodes {
				if n.kind != partition.Parallel {
					continue
				}
				for i := range n.kids {
					for k := 1; k < d.devs.n; k++ {
						for _, δ := range []int{0, 1, 3} {
							if !reachable(d, k, δ) {
								continue
							}
							s := sub{n, i, k, δ}
							want := d.groupHost(s, d.sp.tails[0], false)
							for _, tl := range d.sp.tails[1:] {
								if v := d.groupHost(s, tl, false); v != want {
									t.Fatalf("%s at T %v: node %d from kid %d on set %d (δ %d): %d under tail %d, %d under tail 0", c.name, ts[j], n.id, i, k, δ, v, tl.id, want)
								}
							}
							d.tu.shareFeeds = true
							v := shared.groupHost(s, d.sp.tails[len(d.sp.tails)-1], false)
							d.tu.shareFeeds = false
							if v != want {
								t.Fatalf("%s at T %v: node %d from kid %d on set %d (δ %d): %d from the shared table, %d computed per tail", c.name, ts[j], n.id, i, k, δ, v, want)
							}
							checked++
						}
					}
				}
			}
		}
	}
	if checked < 1000 {
		t.Errorf("only %d subproblems checked: the test barely ran", checked)
	}
	t.Logf("%d subproblems checked", checked)
}

// TestShareFeedsSamePlans: groupHost's answers with no tail left to place,
// shared by every tail, give the same plans as each tail's own, byte for
// byte (bisectCases).
func TestShareFeedsSamePlans(t *testing.T) {
	t.Parallel()
	samePlansToggled(t, func(tu *tuning) *bool { return &tu.shareFeeds }, "sharing the tail-free answers")
}

// reachable says whether a subproblem on set k with δ stages after it can
// be reached from the root on every device: its devices and the stages
// after it (each on a device at least) are at most all of them.
func reachable(d *dp, k, δ int) bool {
	groups := 0
	for t := range d.devs.counts {
		groups += d.devs.digit(k, t)
	}
	return δ+groups <= d.D
}
