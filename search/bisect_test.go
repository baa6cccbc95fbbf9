package search

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/partition"
	"github.com/graphpipe/graphpipe/plan"
)

// encodeNoTime is a plan's file with the one field that measures the
// machine (the search's wall time) zeroed.
func encodeNoTime(p *plan.Plan) []byte {
	q := *p
	q.Search.Seconds = 0
	return q.Encode()
}

// searchBounded is Search with the bisection's bounds on and off (dpmemo.go).
func searchBounded(t *testing.T, g *dag.Graph, o Options) (bounded, plain []byte) {
	t.Helper()
	run := func(on bool) []byte {
		saved := boundedBisection
		boundedBisection = on
		defer func() { boundedBisection = saved }()
		p, err := Search(g, o)
		if err != nil {
			return []byte("error: " + err.Error())
		}
		return encodeNoTime(p)
	}
	return run(true), run(false)
}

// TestBoundedBisectionSamePlans: the bisection over T with the bounds that
// earlier solves give (dpmemo.go) finds the same plans as the plain
// bisection, byte for byte: on random DAGs, fork-join chains and the zoo's
// branchy models, every strategy and schedule, with memory squeezed so that
// recomputation and the depth rule bind, and with devices in groups.
func TestBoundedBisectionSamePlans(t *testing.T) {
	type tc struct {
		name string
		g    *dag.Graph
		o    Options
	}
	var cases []tc
	v100 := plan.Profiles["v100"]
	for seed := int64(0); seed < 24; seed++ {
		g, err := models.RandomDAG(seed, 6+int(seed%5)*6, 256)
		if err != nil {
			t.Fatal(err)
		}
		sched := []string{"1f1b", "gpipe", "zb", "1f1b-depth"}[seed%4]
		strat := []string{"gpp", "spp", "gpp"}[seed%3]
		o := Options{Device: v100, Devices: 2 + int(seed%7), Batch: 64, Schedule: sched, Strategy: strat}
		if seed%2 == 1 { // tight: the depth rule and recomputation bind
			var static int64
			for i := 0; i < g.NumOps(); i++ {
				static += g.Cost(i).Params*16 + 2*g.Cost(i).OutBytes*64
			}
			o.MemoryLimit = static/int64(o.Devices) + 1<<20
		}
		cases = append(cases, tc{fmt.Sprintf("random-%d", seed), g, o})
	}
	fj, err := models.ForkJoin(6, 3, 256)
	if err != nil {
		t.Fatal(err)
	}
	cases = append(cases, tc{"forkjoin-8", fj, Options{Device: v100, Devices: 8, Batch: 256}},
		tc{"forkjoin-8-tight", fj, Options{Device: v100, Devices: 8, Batch: 256, MemoryLimit: 9 << 20}})
	for _, m := range []struct {
		name    string
		devices int
	}{{"case-study", 8}, {"dlrm", 16}, {"candle-uno", 8}, {"mmt", 96}} {
		e, err := models.Lookup(m.name)
		if err != nil {
			t.Fatal(err)
		}
		g, err := e.Build(e.Small)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, tc{m.name, g, Options{Device: plan.Profiles["cpu"], Devices: m.devices}})
	}
	plans := 0
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bounded, plain := searchBounded(t, c.g, c.o)
			if !bytes.HasPrefix(plain, []byte("error")) {
				plans++
			} else {
				t.Log(string(plain))
			}
			if !bytes.Equal(bounded, plain) {
				t.Errorf("the bounded bisection's plan differs from the plain one's:\n%s\n---\n%s", bounded, plain)
			}
		})
	}
	if plans < len(cases)*3/4 {
		t.Errorf("only %d of %d cases have a plan: the test barely ran", plans, len(cases))
	}
}

// TestSortTimes: the radix sort orders times as sort.Float64s does.
func TestSortTimes(t *testing.T) {
	for _, n := range []int{0, 1, 255, 256, 1000, 5000} {
		r := rand.New(rand.NewPCG(uint64(n), 1))
		ts := make([]float64, n)
		for i := range ts {
			switch i % 4 {
			case 0:
				ts[i] = r.Float64() * 1e-3
			case 1:
				ts[i] = float64(r.IntN(10)) // ties, and zeros
			case 2:
				ts[i] = r.ExpFloat64() * 1e6
			default:
				ts[i] = ts[r.IntN(i)]
			}
		}
		want := append([]float64(nil), ts...)
		sort.Float64s(want)
		sortTimes(ts)
		if !slices.Equal(ts, want) {
			t.Fatalf("%d times: radix sort differs from sort.Float64s", n)
		}
	}
}

// TestPriceAllIsPriceAt: the written-out pricing of every block on every
// device count (priceAll) gives what fits needs exactly as pricing each
// stage does (space.priceAt, fitEntry, recomputed): on the zoo's models
// and random DAGs, grouped devices, every recompute setting, within a node
// and across nodes, with and without optimizer state.
func TestPriceAllIsPriceAt(t *testing.T) {
	var graphs []*dag.Graph
	for _, name := range []string{"mmt", "dlrm", "candle-uno", "case-study"} {
		e, err := models.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		g, err := e.Build(e.Small)
		if err != nil {
			t.Fatal(err)
		}
		graphs = append(graphs, g)
	}
	for seed := int64(0); seed < 4; seed++ {
		g, err := models.RandomDAG(seed, 12, 128)
		if err != nil {
			t.Fatal(err)
		}
		graphs = append(graphs, g)
	}
	checked := 0
	measured := plan.Profiles["v100"] // and what a run pays beside its ops
	measured.RunCosts = plan.RunCosts{NATSLat: 3e-5, NATSBW: 5e8, RingLat: 7e-5, RingBW: 2e8, SendS: 1e-5, SendBW: 2e9,
		RecvS: 4e-6, RecvBW: 3e9, HostCores: 2, CoreSlowdown: plan.NewSlowdowns(1, 1.2, 1.7)}
	for di, dev := range []plan.Device{plan.Profiles["v100"], measured} {
		for gi, g := range graphs {
			for _, c := range []struct {
				devices   int
				b         int64
				recompute string
				opt       int64
				memory    int64
			}{{3, 16, "auto", 0, 0}, {4, 4, "all", NoOptimizerState, 1 << 22}, {100, 256, "auto", 4, 0}, {8, 64, "off", 0, 1 << 20}} {
				o, err := Options{Device: dev, Devices: c.devices, Batch: 1024, Recompute: c.recompute, OptimizerBytes: c.opt, MemoryLimit: c.memory}.withDefaults(g.BatchSize())
				if err != nil {
					t.Fatal(err)
				}
				cm := newCostModel(g, &o)
				for _, sp := range []*space{newSpace(cm, partition.Decompose(g, 0).Root, cm.boundary), chainSpace(g, &o, cm)} {
					d := newPrices(cm, sp, c.devices, c.b, int(o.Batch/c.b), false)
					for id, blk := range sp.blocks {
						for k := 1; k <= d.kmax; k++ {
							s := sp.price(cm, id, k*d.g, d.b, d.mbs)
							at := id*(d.kmax+1) + k
							if want := d.fitEntry(&s); d.fit[at] != want {
								t.Fatalf("device %d graph %d %+v block %d on %d: fit %+v, priceAt %+v", di, gi, c, id, k, d.fit[at], want)
							}
							if d.recFit != nil {
								r := recomputed(s, blk)
								if want := d.fitEntry(&r); d.recFit[at] != want {
									t.Fatalf("device %d graph %d %+v block %d on %d: recomputing %+v, priceAt %+v", di, gi, c, id, k, d.recFit[at], want)
								}
							}
							checked++
						}
					}
				}
			}
		}
	}
	t.Logf("%d prices checked", checked)
}

// TestMergeTimes: the candidates with recomputation allowed, merged from
// the keeping ones and the recomputing ones, are the distinct times of all.
func TestMergeTimes(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for n := 0; n < 50; n++ {
		var a, b []fitEntry
		var all []fitEntry
		for i := 0; i < r.IntN(600); i++ {
			e := fitEntry{float64(r.IntN(300)), r.IntN(3) - 1}
			if i%2 == 0 {
				a = append(a, e)
			} else {
				b = append(b, e)
			}
			all = append(all, e)
		}
		if got, want := mergeTimes(distinctTimes(a, 0), distinctTimes(b, 0)), distinctTimes(all, 0); !slices.Equal(got, want) {
			t.Fatalf("merged %v, want %v", got, want)
		}
	}
}
