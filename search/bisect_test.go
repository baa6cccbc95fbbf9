package search

import (
	"bytes"
	"fmt"
	"math"
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

// speedup names one of a tuning's switches.
type speedup func(*tuning) *bool

// searchToggled is Search with a switch of the search's tuning on and off,
// the others as defaultTuning has them.
func searchToggled(t *testing.T, g *dag.Graph, o Options, flag speedup) (on, off []byte) {
	t.Helper()
	run := func(v bool) []byte {
		tu := defaultTuning()
		*flag(&tu) = v
		p, err := searchTuned(g, o, tu)
		if err != nil {
			return []byte("error: " + err.Error())
		}
		return encodeNoTime(p)
	}
	return run(true), run(false)
}

// bisectCase is a search the bisection's tests run both ways.
type bisectCase struct {
	name string
	g    *dag.Graph
	o    Options
}

// bisectCases are random DAGs, fork-join chains and the zoo's branchy
// models, every strategy and schedule, with memory squeezed so that
// recomputation and the depth rule bind, and with devices in groups.
func bisectCases(t *testing.T) []bisectCase {
	var cases []bisectCase
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
		cases = append(cases, bisectCase{fmt.Sprintf("random-%d", seed), g, o})
	}
	fj, err := models.ForkJoin(6, 3, 256)
	if err != nil {
		t.Fatal(err)
	}
	cases = append(cases, bisectCase{"forkjoin-8", fj, Options{Device: v100, Devices: 8, Batch: 256}},
		bisectCase{"forkjoin-8-tight", fj, Options{Device: v100, Devices: 8, Batch: 256, MemoryLimit: 9 << 20}})
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
		cases = append(cases, bisectCase{m.name, g, Options{Device: plan.Profiles["cpu"], Devices: m.devices}})
	}
	return cases
}

// samePlansToggled checks that every bisectCase plans the same, byte for
// byte, with flag on and off.
func samePlansToggled(t *testing.T, flag speedup, what string) {
	cases := bisectCases(t)
	plans := 0
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			on, off := searchToggled(t, c.g, c.o, flag)
			if !bytes.HasPrefix(off, []byte("error")) {
				plans++
			} else {
				t.Log(string(off))
			}
			if !bytes.Equal(on, off) {
				t.Errorf("the plan %s differs from the one without:\n%s\n---\n%s", what, on, off)
			}
		})
	}
	if plans < len(cases)*3/4 {
		t.Errorf("only %d of %d cases have a plan: the test barely ran", plans, len(cases))
	}
}

// TestBoundedBisectionSamePlans: the bisection over T with the bounds that
// earlier solves give (dpmemo.go) finds the same plans as the plain
// bisection, byte for byte (bisectCases).
func TestBoundedBisectionSamePlans(t *testing.T) {
	t.Parallel()
	samePlansToggled(t, func(tu *tuning) *bool { return &tu.boundedBisection }, "with the bisection's bounds")
}

// TestMidFirstSamePlans: the bisection that solves its middle candidate
// first (midFirst) finds the same plans as the one that checks the top
// first, byte for byte (bisectCases).
func TestMidFirstSamePlans(t *testing.T) {
	t.Parallel()
	samePlansToggled(t, func(tu *tuning) *bool { return &tu.midFirst }, "solving the middle first")
}

// TestValueBisectionSamePlans: bisecting the candidates' values (leastT)
// finds the same plans as bisecting their sorted list, byte for byte
// (bisectCases).
func TestValueBisectionSamePlans(t *testing.T) {
	t.Parallel()
	samePlansToggled(t, func(tu *tuning) *bool { return &tu.valueBisection }, "bisecting the candidates' values")
}

// TestHintsSamePlans: the bisections looking first where earlier DPs found
// their least T (hints.go) find the same plans as looking at the
// candidates' median, byte for byte (bisectCases).
func TestHintsSamePlans(t *testing.T) {
	t.Parallel()
	samePlansToggled(t, func(tu *tuning) *bool { return &tu.hintsOn }, "with hints")
}

// TestFrontierWindowSamePlans: the frontier sorting only the candidates it
// may probe finds the same plans as sorting them all, byte for byte
// (bisectCases).
func TestFrontierWindowSamePlans(t *testing.T) {
	t.Parallel()
	samePlansToggled(t, func(tu *tuning) *bool { return &tu.frontierWindow }, "sorting the frontier's window")
}

// TestReuseProbeSamePlans: a frontier's bisection that takes the values
// its probe solved at its first candidate (reuseProbe) finds the same plans
// as one that solves it again, byte for byte (bisectCases).
func TestReuseProbeSamePlans(t *testing.T) {
	t.Parallel()
	samePlansToggled(t, func(tu *tuning) *bool { return &tu.reuseProbe }, "reusing the frontier's probe")
}

// TestMinTBelowIsLinearScan: the bisection's least T (minTBelow, uncapped,
// in either order, bounded or not) is the first candidate, from the from-th
// on and at most maxT, at which a fresh solve of the root on k devices holds
// fewer than depth, found by trying them all; none where none does. Every k
// up to the devices (some fit nothing), several micro-batch sizes, depth
// caps and starting points, memory tight and loose. Over every candidate
// with no cap, leastT (the bisection of their values) finds the same T and
// leaves the DP solved there, wherever a hint has it look first.
func TestMinTBelowIsLinearScan(t *testing.T) {
	t.Parallel()
	checked, found := 0, 0
	for seed := int64(0); seed < 8; seed++ {
		g, err := models.RandomDAG(100+seed, 6+int(seed%3)*5, 256)
		if err != nil {
			t.Fatal(err)
		}
		o, err := Options{Device: plan.Profiles["v100"], Devices: 3 + int(seed%4), Batch: 64}.withDefaults(g.BatchSize())
		if err != nil {
			t.Fatal(err)
		}
		if seed%2 == 1 {
			var static int64
			for i := 0; i < g.NumOps(); i++ {
				static += g.Cost(i).Params*16 + 2*g.Cost(i).OutBytes*64
			}
			o.MemoryLimit = static/int64(o.Devices) + 1<<20
		}
		cm := newCostModel(g, &o)
		sp := newSpace(cm, partition.Decompose(g, o.MaxSeries).Root, cm.boundary)
		for _, b := range []int64{1, 8, 64} {
			pr := newPrices(cm, sp, o.Devices, b, int(o.Batch/b), false)
			oracle := &dp{prices: pr}
			ts := oracle.candidates()
			fresh := func(k, i int) int {
				oracle.reset(ts[i])
				return oracle.solve(sp.root, k, 0)
			}
			for k := 1; k <= pr.D; k++ {
				for _, q := range []struct{ from, depth, top int }{{0, inf, len(ts)}, {0, 3, len(ts)}, {len(ts) / 3, inf, len(ts)}, {0, inf, len(ts) / 2}, {len(ts) / 4, 2, len(ts) * 3 / 4}} {
					want := -1
					for i := q.from; i < q.top; i++ {
						if fresh(k, i) < q.depth {
							want = i
							break
						}
					}
					maxT := math.Inf(1)
					if q.top < len(ts) {
						maxT = ts[q.top-1]
					}
					for _, mid := range []bool{true, false} {
						for _, bounded := range []bool{true, false} {
							pr.tu.midFirst, pr.tu.boundedBisection = mid, bounded
							d := &dp{prices: pr}
							T, i, ok := d.minTBelow(k, q.from, q.depth, maxT)
							if mid && q.from == 0 && q.depth == inf && q.top == len(ts) { // what leastT answers, wherever a hint has it look first
								hints := []float64{0, ts[0] / 2, ts[0], ts[len(ts)/2], ts[len(ts)-1], 2 * ts[len(ts)-1], (ts[0] + ts[len(ts)-1]) / 3}
								if want >= 0 {
									hints = append(hints, ts[want], ts[max(want-1, 0)], ts[min(want+1, len(ts)-1)])
								}
								for _, h := range hints {
									lt := &dp{prices: pr, hint: h}
									if T2, ok2 := lt.leastT(k); ok2 != ok || ok && (T2 != T || lt.depth(k) != fresh(k, want)) {
										t.Fatalf("seed %d b %d k %d bounded %v hint %v: leastT (%v, %v), minTBelow (%v, %v)", seed, b, k, bounded, h, T2, ok2, T, ok)
									}
								}
							}
							pr.tu.midFirst, pr.tu.boundedBisection = true, true
							if ok != (want >= 0) || ok && (i != want || T != ts[want]) {
								t.Fatalf("seed %d b %d k %d %+v mid %v bounded %v: minTBelow (%v, %d, %v), first fitting candidate %d", seed, b, k, q, mid, bounded, T, i, ok, want)
							}
							if ok && d.depth(k) != fresh(k, want) {
								t.Fatalf("seed %d b %d k %d %+v: left solved at depth %d, a fresh solve has %d", seed, b, k, q, d.depth(k), fresh(k, want))
							}
							checked++
							if ok {
								found++
							}
						}
					}
				}
			}
		}
	}
	if found < checked/4 || found == checked {
		t.Errorf("%d of %d bisections found a T: the test does not tell", found, checked)
	}
	t.Logf("%d bisections checked, %d found a T", checked, found)
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

// TestDistinctTimes: the candidates of a fit table are its entries' times
// that fit one in flight and are not below the floor, sorted, each once;
// tables large and small, many times repeated.
func TestDistinctTimes(t *testing.T) {
	for _, n := range []int{0, 7, 300, 20000} {
		r := rand.New(rand.NewPCG(uint64(n), 2))
		fit := make([]fitEntry, n)
		for i := range fit {
			fit[i] = fitEntry{float64(r.IntN(n/3+1)) * 1e-4, r.IntN(4) - 1}
			if i%5 == 0 {
				fit[i].t = r.ExpFloat64()
			}
		}
		for _, floor := range []float64{0, 1e-3} {
			var want []float64
			for _, e := range fit {
				if e.maxIn >= 1 && e.t >= floor {
					want = append(want, e.t)
				}
			}
			sort.Float64s(want)
			want = slices.Compact(want)
			if got := distinctTimes(fit, floor); !slices.Equal(got, want) {
				t.Fatalf("%d entries, floor %v: %d distinct times, want %d", n, floor, len(got), len(want))
			}
		}
	}
}

// TestPriceAllIsPriceAt: the written-out pricing of every block on every
// device count (priceAll) gives what fits needs exactly as pricing each
// stage does (space.priceAt, fitEntry, recomputed): on the zoo's models
// and random DAGs, grouped devices, every recompute setting, within a node
// and across nodes, with and without optimizer state, at every placement of
// it (and, under auto, the spilled variant: spillFit against spillPrice,
// and spillHelp against the scan over it). And recHelp, priced with fit,
// answers recomputeMayHelp at every candidate time as the scan over recFit
// does.
func TestPriceAllIsPriceAt(t *testing.T) {
	t.Parallel()
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
	checked, spillsMore := 0, 0
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
				state     string
			}{{3, 16, "auto", 0, 0, "replicated"}, {4, 4, "all", NoOptimizerState, 1 << 22, "replicated"}, {100, 256, "auto", 4, 0, "replicated"}, {8, 64, "off", 0, 1 << 20, "replicated"},
				{3, 16, "auto", 0, 1 << 20, "auto"}, {4, 4, "all", 0, 1 << 22, "auto"}, {100, 256, "auto", 4, 1 << 21, "sharded"}, {1, 64, "off", 0, 1 << 18, "host"}, {8, 64, "auto", 0, 1 << 19, "host"}} {
				o, err := Options{Device: dev, Devices: c.devices, Batch: 1024, Recompute: c.recompute, OptimizerBytes: c.opt, MemoryLimit: c.memory, OptimizerState: c.state}.withDefaults(g.BatchSize())
				if err != nil {
					t.Fatal(err)
				}
				cm := newCostModel(g, &o)
				for _, sp := range []*space{newSpace(cm, partition.Decompose(g, 0).Root, cm.boundary), chainSpace(g, &o, cm)} {
					d := newPrices(cm, sp, c.devices, c.b, int(o.Batch/c.b), false)
					help := d.recHelp
					d.recFits()
					checkRecHelp(t, &dp{prices: d}, help)
					for id := range sp.blocks { // least and recLeast: the least time of each row that fits one in flight
						for _, f := range []struct {
							fit   []fitEntry
							least []float64
						}{{d.fit, d.least}, {d.recFit, d.recLeast}} {
							if f.fit == nil {
								continue
							}
							want := math.Inf(1)
							for _, e := range f.fit[id*d.W : (id+1)*d.W] {
								if e.maxIn >= 1 {
									want = min(want, e.t)
								}
							}
							if f.least[id] != want {
								t.Fatalf("device %d graph %d %+v block %d: least %v, its row's %v", di, gi, c, id, f.least[id], want)
							}
						}
					}
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
					if c.state == StateAuto {
						n, more := checkSpillFit(t, d, fmt.Sprintf("device %d graph %d %+v", di, gi, c))
						checked, spillsMore = checked+n, spillsMore+more
					}
				}
			}
		}
	}
	if spillsMore == 0 {
		t.Error("no stage spilled holds more in flight than keeping its state: the spilled prices went untested")
	}
	t.Logf("%d prices checked, %d where spilling holds more", checked, spillsMore)
}

// checkRecHelp checks recomputeMayHelp by recHelp (help, priced with fit)
// against the scan over recFit: at times of fit and recFit (a sample of
// them), past them, and on either side of help; it returns how many times
// the scan said yes.
func checkRecHelp(t *testing.T, d *dp, help float64) (yes int) {
	t.Helper()
	var ts []float64
	for _, all := range [][]float64{distinctTimes(d.fit, 0), distinctTimes(d.recFit, 0)} {
		for i := 0; i < len(all); i += max(1, len(all)/40) {
			ts = append(ts, all[i])
		}
	}
	ts = append(ts, math.Inf(1), help, math.Nextafter(help, math.Inf(1)), math.Nextafter(help, 0))
	for _, T := range ts {
		d.recHelp = help
		lazy := d.recomputeMayHelp(T)
		d.tu.eagerRecFit = true
		scan := d.recomputeMayHelp(T)
		d.tu.eagerRecFit = false
		if lazy != scan {
			t.Fatalf("recomputeMayHelp at %v: %v by recHelp (%v), %v by the scan over recFit", T, lazy, help, scan)
		}
		if scan {
			yes++
		}
	}
	return yes
}

// TestEagerRecFitSamePlans: pricing recFit only where a DP lets stages
// recompute (recFits, recHelp) gives the same plans as pricing it with fit
// and scanning it, byte for byte (bisectCases).
func TestEagerRecFitSamePlans(t *testing.T) {
	t.Parallel()
	samePlansToggled(t, func(tu *tuning) *bool { return &tu.eagerRecFit }, "pricing recFit with fit")
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

// checkSpillFit checks the spilled prices of d (spilled) entry by entry
// against spillPrice, and spillHelp, priced with d's fit, against the scan
// over them at each of their times; it returns the entries checked and
// those where spilling holds more in flight than keeping.
func checkSpillFit(t *testing.T, d *prices, what string) (n, more int) {
	t.Helper()
	s := d.spilled()
	most := d.mbs
	if !d.gpipe {
		most = min(d.mbs, d.D)
	}
	for id := range d.sp.blocks {
		for k := 1; k <= d.kmax; k++ {
			c := d.sp.spillPrice(d.cm, id, k*d.g, d.b, d.mbs, most)
			at := id*d.W + k
			if want := d.fitEntry(&c); s.recFit[at] != want {
				t.Fatalf("%s block %d on %d: spilled %+v, spillPrice %+v", what, id, k, s.recFit[at], want)
			}
			if s.recFit[at].maxIn > d.fit[at].maxIn {
				more++
			}
			n++
		}
	}
	for _, T := range append(distinctTimes(s.recFit, 0), math.Inf(1)) {
		scan := false
		for at, r := range s.recFit {
			keep := d.fit[at].maxIn
			if keep < most && r.t < T && min(r.maxIn, most) > keep {
				scan = true
				break
			}
		}
		if got := d.spillMayHelp(T); got != scan {
			t.Fatalf("%s: spillMayHelp(%v) says %v, the scan over the spilled prices %v", what, T, got, scan)
		}
	}
	return n, more
}
