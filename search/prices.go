package search

import (
	"math"
	"sync"
)

// prices are what the DP at one micro-batch knows of every candidate stage
// on every device count of every kind: what fits needs. They do not depend
// on T, and the DPs at one micro-batch share them (the search's,
// recomputation's and the frontier's).
type prices struct {
	tu    tuning // the first kind's cost model's, read in the DP's loops
	sp    *space
	cm    *costModel   // prices the stages (the first kind's)
	kinds []*costModel // per device kind, what prices its stages (just cm, for devices of one kind)
	D     int          // devices, in groups, of every kind: every count below counts groups
	g     int          // devices per group of the first kind (dpGroup)
	b     int64        // micro-batch
	mbs   int          // micro-batches per iteration
	gpipe bool
	// fit is what fits needs, packed: [block·W + column], a column per
	// kind and count, off[t]+k for k groups of kind t (k ≤ kmax of it;
	// for devices of one kind, column k)
	fit  []fitEntry
	kmax int // the first kind's most groups per stage: min(its groups, b/g)
	W    int
	devs devSets
	// recFit is fit for the stages recomputing their forward during
	// backward, where the planner may let them (the cost model's recompute
	// is "auto"), priced when a DP first lets them (recFits); nil until
	// then and otherwise. recHelp is the least time at which a stage
	// recomputing holds more micro-batches in flight than keeping, counted
	// up to the most the DP asks of it (+Inf where none does): priced with
	// fit, it answers recomputeMayHelp without recFit.
	recFit []fitEntry
	// least and recLeast are, per block, the least time at which it fits
	// one micro-batch in flight on some device count, keeping and
	// recomputing (+Inf where it never does): priceAll finds them as it
	// prices, and the floors below read them rather than the rows
	least, recLeast []float64
	recAuto         bool
	recOnce         sync.Once
	recHelp         float64
	// alt is what recFit holds: the stages recomputing (altRecompute), or
	// their optimizer state spilled to host memory (altSpill: spillAt's
	// prices, spilled). spillHelp is recHelp for spilling, priced with fit
	// where the options let the DP spill: the least time at which a stage
	// spilling holds more micro-batches in flight than keeping its state on
	// the device, up to the most the DP asks of it (+Inf where none does).
	alt       altKind
	spillHelp float64
	// bound, in the spilled prices, is per entry the variant (keeping its
	// state on the device, or spilled) that meets the least time with one
	// micro-batch in flight: what the bounds that ignore depth read
	// (fitsTime, runTimes, least and the floors), where fit alone would
	// rule out a stage that fits only spilled; nil otherwise (recomputing
	// never fits where keeping does not: fit is its bound too)
	bound []fitEntry
	// tailFloor is, per tail, the least per-micro-batch time of any stage that
	// absorbs it: a tail whose floor exceeds T cannot be absorbed, nor can a
	// longer one.
	tailFloor []float64
	headFloor []float64 // the same for heads (fork absorption)
	// hostFloor is, per tail, per node of the parallel kid before it, the
	// least T at which a stage of the tail and one of the node's sink
	// stages (hostBlocks) meets T and fits one micro-batch in flight,
	// keeping [0] or either way [1] (index by tail id, then node id;
	// +Inf where no union fits); [1] is [0] until recFits prices the
	// recomputing stages
	hostFloor [][2][]float64
	// keepTs and recTs are the candidate times (dp.candidates), keeping
	// and with recomputation allowed, once asked for; keepKeys and recKeys
	// the same times' bits unsorted, each as often as an entry has it
	// (dp.candidateKeys)
	keepTs, recTs     []float64
	keepKeys, recKeys []uint64
	// runs are, per series node of leaves (a chain: spp's space, or a
	// branch), when its split loop reaches each unit (runTimes); nil for
	// other nodes
	runs []*runTimes
}

// runTimes bound how many stages the units of a series node of leaves
// need at T (dp.stagesAt): from unit a, suffix's split loop on k devices
// reaches p when every interval a..p' (p' ≤ p) meets T and fits one
// micro-batch in flight on k devices, and the last interval a..last is a
// stage of its own when it does.
type runTimes struct {
	reach [][]float64 // [a][p-a]: the least T at which the loop reaches p from a, on some device count
	last  []float64   // [a]: the least T at which units a..last meet T as one stage, on some device count
}

// newPrices prices every block of sp under cm on every device count.
func newPrices(cm *costModel, sp *space, devices int, b int64, mbs int, gpipe bool) *prices {
	return newKindPrices([]*costModel{cm}, []int{devices}, sp, b, mbs, gpipe)
}

// newKindPrices prices every block of sp on every count of devices of each
// kind, kinds[t] pricing the devices[t] of kind t.
func newKindPrices(kinds []*costModel, devices []int, sp *space, b int64, mbs int, gpipe bool) *prices {
	d := &prices{tu: kinds[0].tu, sp: sp, cm: kinds[0], kinds: kinds, b: b, mbs: mbs, gpipe: gpipe}
	d.devs = newDevSets(devices, b, d.tu.maxDPDevices)
	d.D, d.g, d.kmax, d.W = d.devs.total, d.devs.g[0], d.devs.kmax[0], d.devs.w
	d.fit = make([]fitEntry, len(sp.blocks)*d.W)
	d.recAuto, d.recHelp, d.spillHelp = d.cm.recompute == "auto", math.Inf(1), math.Inf(1)
	d.least = infs(len(sp.blocks))
	for t := range kinds {
		d.priceAll(t, false)
	}
	d.tailFloor, d.headFloor = d.floors(sp.tails), d.floors(sp.heads)
	d.hostFloor = d.hostFloors(false)
	if d.tu.eagerRecFit {
		d.recFits()
	}
	d.runs = make([]*runTimes, len(sp.nodes))
	for _, n := range sp.nodes {
		if n.chain() {
			d.runs[n.id] = d.runTimes(n)
		}
	}
	return d
}

// altKind is what a prices' second variant of every stage is.
type altKind uint8

const (
	altRecompute altKind = iota // the stage recomputes its forward during backward
	altSpill                    // the stage's optimizer state is in host memory (spill)
)

// spilled is d with the stages' second variant their state spilled to host
// memory, sharing what d priced of keeping it: its fit, floors and runs.
func (d *prices) spilled() *prices {
	s := &prices{tu: d.tu, sp: d.sp, cm: d.cm, kinds: d.kinds, D: d.D, g: d.g, b: d.b, mbs: d.mbs, gpipe: d.gpipe,
		fit: d.fit, kmax: d.kmax, W: d.W, devs: d.devs, least: d.least, recAuto: true, recHelp: math.Inf(1), alt: altSpill,
		spillHelp: d.spillHelp}
	s.recFits()
	s.bound, s.least = make([]fitEntry, len(s.fit)), infs(len(s.sp.blocks))
	for at, e := range s.fit {
		if r := s.recFit[at]; r.maxIn >= 1 && (e.maxIn < 1 || r.t < e.t) {
			e = r
		}
		if s.bound[at] = e; e.maxIn >= 1 {
			s.least[at/s.W] = min(s.least[at/s.W], e.t)
		}
	}
	s.tailFloor, s.headFloor = s.floors(s.sp.tails), s.floors(s.sp.heads)
	s.hostFloor = s.hostFloors(true)
	s.runs = make([]*runTimes, len(s.sp.nodes))
	for _, n := range s.sp.nodes {
		if n.chain() {
			s.runs[n.id] = s.runTimes(n)
		}
	}
	return s
}

// bounds is what the bounds that ignore depth read: bound in the spilled
// prices, else fit.
func (d *prices) bounds() []fitEntry {
	if d.bound != nil {
		return d.bound
	}
	return d.fit
}

// recFits is recFit, priced when first asked for (nil where the planner
// may not let stages recompute), with hostFloor's [1] then.
func (d *prices) recFits() []fitEntry {
	if !d.recAuto {
		return nil
	}
	d.recOnce.Do(func() {
		d.recFit, d.recLeast = make([]fitEntry, len(d.fit)), infs(len(d.sp.blocks))
		for t := range d.kinds {
			d.priceAll(t, true)
		}
		d.hostFloor = d.hostFloors(true)
	})
	return d.recFit
}

// hostFloors computes hostFloor from fit, and from recFit if rec.
func (d *prices) hostFloors(rec bool) [][2][]float64 {
	sp := d.sp
	out := make([][2][]float64, len(sp.tails))
	for _, t := range sp.tails {
		for v := range out[t.id] {
			out[t.id][v] = make([]float64, len(sp.nodes))
		}
		var walk func(n *snode)
		walk = func(n *snode) {
			keep, either := math.Inf(1), math.Inf(1)
			for _, h := range sp.hosts[n.id] {
				u := t.union(h)
				keep, either = min(keep, d.least[u]), min(either, d.least[u])
				if rec {
					either = min(either, d.recLeast[u])
				}
			}
			out[t.id][0][n.id], out[t.id][1][n.id] = keep, either
			for _, k := range n.kids {
				walk(k)
			}
		}
		walk(t.kid)
	}
	return out
}

// runTimes computes n's runTimes from fit.
func (d *prices) runTimes(n *snode) *runTimes {
	u := len(n.units)
	r := &runTimes{reach: make([][]float64, u), last: make([]float64, u)}
	inf := math.Inf(1)
	for a := 0; a < u; a++ {
		r.reach[a] = make([]float64, u-a)
		for q := range r.reach[a] {
			r.reach[a][q] = inf
		}
		r.last[a] = inf
		for col := 0; col < d.W; col++ { // a column of no devices never fits
			worst := 0.0 // the slowest interval a..p' so far on the column's devices
			for q, id := range n.blk[a] {
				e := &d.bounds()[id*d.W+col]
				if e.maxIn < 1 {
					worst = inf
				}
				worst = max(worst, e.t)
				r.reach[a][q] = min(r.reach[a][q], worst)
				if e.maxIn >= 1 && a+q == u-1 {
					r.last[a] = min(r.last[a], e.t)
				}
			}
		}
	}
	return r
}

// onK is what pricing a block on k devices (groups) shares with every
// block: the per-device micro-batch and its nodes' prefix sums, and the
// terms of the all-reduce (allReduce's, taken apart).
type onK struct {
	m          int64
	sums       [][][3]float64 // per node, its unitSums at m
	arLat, arF float64        // 2(k−1)·latency and 2(k−1)/k, when k·g > 1
	arBW       float64
	ring       ring // the ring they are priced from (dpRing)
	split      bool // k·g > 1: replicas all-reduce, a whole block does not fit
}

// priceAll fills fit's columns of kind t (recFit's if rec) block by block,
// in their order, with exactly the arithmetic of space.priceAt, fitEntry
// and recomputed (TestPriceAllIsPriceAt): the planner's innermost pricing,
// written out with what does not depend on the block hoisted out of its
// loop. Pricing fit, it lowers recHelp where a stage would hold more in
// flight recomputing (recomputeMayHelp's test, entry by entry).
func (d *prices) priceAll(t int, rec bool) {
	cm, sp, g, kmax, off := d.kinds[t], d.sp, d.devs.g[t], d.devs.kmax[t], d.devs.off[t]
	ks := make([]onK, kmax+1)
	for k := 1; k <= kmax; k++ {
		kg := k * g
		e := &ks[k]
		e.m = ceilDiv(d.b, int64(kg))
		if k > 1 && ks[k-1].m == e.m {
			e.sums = ks[k-1].sums // the micro-batch only shrinks as k grows
		} else {
			e.sums = sp.nodeSums(cm, e.m)
		}
		if e.split = kg > 1; e.split {
			e.ring = cm.dpRing(kg)
			r := e.ring
			e.arLat, e.arF, e.arBW = 2*float64(r.k-1)*r.lat, 2*float64(r.k-1)/float64(r.k), r.bw
		}
	}
	stageLink := edgeLink(cm.dev, cm.interDP())
	linkLat, linkBW := stageLink.lat, stageLink.bw
	all := cm.recompute == "all"
	mbs, limit := d.mbs, cm.limit
	most := d.mbs // the most in flight the DP asks of a stage
	if !d.gpipe {
		most = min(d.mbs, d.D)
	}
	for id, blk := range sp.blocks {
		ref := sp.owner[id]
		host, n := ref, ref.n // the interval whose sums give the times, and a tail's node
		if ref.tail != nil {
			host, n = sp.owner[ref.host], ref.tail.n
		}
		arBytes, linkBytes := 4*float64(blk.params), float64(max(blk.inB, blk.outB))
		for k := 1; k <= kmax; k++ {
			e := &ks[k]
			s := e.sums[host.n.id]
			f, bi, bw := s[host.p+1][0]-s[host.i][0], s[host.p+1][1]-s[host.i][1], s[host.p+1][2]-s[host.i][2]
			if ref.tail != nil {
				t := e.sums[n.id]
				f += t[ref.tail.p+1][0] - t[ref.tail.i][0]
				bi += t[ref.tail.p+1][1] - t[ref.tail.i][1]
				bw += t[ref.tail.p+1][2] - t[ref.tail.i][2]
			}
			ar := 0.0
			if e.split && arBytes > 0 {
				ar = e.arLat + e.arF*arBytes/e.arBW
			}
			link := 0.0
			if lb := linkBytes * float64(e.m); lb > 0 {
				link = 2 * (linkLat + lb/linkBW)
			}
			x := entryIn{cm: cm, blk: blk, kg: k * g, ring: e.ring, m: e.m, split: e.split, f: f, bi: bi, bw: bw, ar: ar, link: link, mbs: mbs, limit: limit, all: all}
			pl := cm.primary(x.kg)
			if pl == placeHost || rec && d.alt == altSpill {
				base, stash := cm.held(blk, e.m)
				pl = cm.spill(blk, x.kg, base, stash)
			}
			at := id*d.W + off + k
			if rec && d.alt == altSpill {
				r := x.spillEntry(pl, most)
				if d.recFit[at] = r; r.maxIn >= 1 {
					d.recLeast[id] = min(d.recLeast[id], r.t)
				}
				continue
			}
			keepE, period, st := x.entry(pl)
			if rec {
				r := fitEntry{max(period+x.ff, link), maxInFlight(satAdd(st, satAdd(x.work, x.stash)), satMul(blk.inputs, e.m), limit)}
				if d.recFit[at] = r; r.maxIn >= 1 {
					d.recLeast[id] = min(d.recLeast[id], r.t)
				}
				continue
			}
			keep := keepE.maxIn
			d.fit[at] = keepE
			if keep >= 1 {
				d.least[id] = min(d.least[id], d.fit[at].t)
			}
			if d.recAuto && keep < most { // recomputing may hold more (recFit's entry, as it will be)
				if r := maxInFlight(satAdd(st, satAdd(x.work, x.stash)), satMul(blk.inputs, e.m), limit); min(r, most) > keep {
					d.recHelp = min(d.recHelp, max(period+x.ff, link))
				}
			}
			if cm.state == StateAuto && keep < most { // spilling may hold more (the spilled prices' entry, as it will be)
				base, stash := cm.held(blk, e.m)
				if r := x.spillEntry(cm.spill(blk, x.kg, base, stash), most); min(r.maxIn, most) > keep {
					d.spillHelp = min(d.spillHelp, r.t)
				}
			}
		}
	}
}

// entryIn is what priceAll knows of a block on kg devices before its
// state's placement: its pass times, all-reduce and link.
type entryIn struct {
	cm          *costModel
	blk         *block
	kg, mbs     int
	ring        ring
	m, limit    int64
	split, all  bool
	f, bi, bw   float64 // the pass times, before any streaming
	ar, link    float64
	ff          float64 // the forward's time at the placement entry last priced
	work, stash int64   // its memory besides the static, as entry last priced it
}

// spillEntry is the fit entry of x spilled at placement pl, and
// recomputing too where the planner may let it and that holds more
// micro-batches in flight, up to most (spillPrice's).
func (x *entryIn) spillEntry(pl placement, most int) fitEntry {
	r, period, st := x.entry(pl)
	if x.cm.mayRec && !x.all && r.maxIn < most {
		rr := fitEntry{max(period+x.ff, x.link), maxInFlight(satAdd(st, satAdd(x.work, x.stash)), satMul(x.blk.inputs, x.m), x.limit)}
		if min(rr.maxIn, most) > r.maxIn {
			return rr
		}
	}
	return r
}

// entry is the fit entry of x at placement pl, with exactly the arithmetic
// of costModel.finish and fitEntry (and recomputed's, where every stage
// recomputes), and its period and static bytes (for the recomputing
// variant priced from them).
func (x *entryIn) entry(pl placement) (fitEntry, float64, int64) {
	cm, blk := x.cm, x.blk
	f, bi, bw := x.f, x.bi, x.bw
	if pl == placeStreamed {
		f, bi, bw = cm.streamTimes(blk.params, f, bi, bw)
	}
	window := bi + bw
	if cm.split {
		window = bw
	}
	flush := cm.dpFlush(pl, blk.params, x.kg, x.ring, x.ar, window, cm.slow)
	period := f + bi + bw + flush/float64(x.mbs) + cm.messages(blk, x.m)
	st, stash, work := cm.placedStatic(pl, blk, x.kg), satMul(blk.stash, x.m), satMul(blk.work, x.m)
	if blk.whole && x.split {
		st = math.MaxInt64
	}
	if x.all { // recomputed's
		period += f
		stash, work = satMul(blk.inputs, x.m), satAdd(work, stash)
	}
	x.ff, x.work, x.stash = f, work, stash
	return fitEntry{max(period, x.link), maxInFlight(satAdd(st, work), stash, x.limit)}, period, st
}

// infs is n times +Inf.
func infs(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = math.Inf(1)
	}
	return out
}

// fitEntry packs what fits needs of a priced stage of the first kind.
func (d *prices) fitEntry(c *stageCost) fitEntry { return d.fitEntryOf(0, c) }

// fitEntryOf packs what fits needs of a priced stage of kind t.
func (d *prices) fitEntryOf(t int, c *stageCost) fitEntry {
	return fitEntry{math.Max(c.period, c.link), maxInFlight(satAdd(c.static, c.work), c.stashPerMB, d.kinds[t].limit)}
}

// keepCost is block id's price on the devices of device set kv (of one
// kind, in groups) keeping its activations (or recomputing, where the cost
// model makes every stage do so).
func (d *prices) keepCost(id, kv int) stageCost {
	t, k := d.devs.part(kv)
	return d.sp.price(d.kinds[t], id, k*d.devs.g[t], d.b, d.mbs)
}

// floors is, per run of units, the least per-micro-batch time of any stage
// that absorbs it.
func (d *prices) floors(runs []*tailSpec) []float64 {
	out := make([]float64, len(runs))
	for _, t := range runs {
		out[t.id] = math.Inf(1)
		for _, u := range t.unions {
			out[t.id] = math.Min(out[t.id], d.least[u])
		}
	}
	return out
}
