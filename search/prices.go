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
	d.recAuto, d.recHelp = d.cm.recompute == "auto", math.Inf(1)
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
				e := &d.fit[id*d.W+col]
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
			lat, bw := ringLink(cm.dev, kg > cm.perNode)
			e.arLat, e.arF, e.arBW = 2*float64(kg-1)*lat, 2*float64(kg-1)/float64(kg), bw
		}
	}
	stageLink := edgeLink(cm.dev, cm.interDP())
	linkLat, linkBW := stageLink.lat, stageLink.bw
	all := cm.recompute == "all"
	mbs, limit := float64(d.mbs), cm.limit
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
		arBytes, opt := 4*float64(blk.params), cm.optimizerStep(blk.params)
		static, linkBytes := cm.static(blk.params), float64(max(blk.inB, blk.outB))
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
			flush := 0.0
			if e.split && arBytes > 0 {
				flush = e.arLat + e.arF*arBytes/e.arBW
			}
			flush += opt
			period := f + bi + bw + flush/mbs + cm.messages(blk, e.m)
			link := 0.0
			if lb := linkBytes * float64(e.m); lb > 0 {
				link = 2 * (linkLat + lb/linkBW)
			}
			st, stash, work := static, satMul(blk.stash, e.m), satMul(blk.work, e.m)
			if blk.whole && e.split {
				st = math.MaxInt64
			}
			if all { // recomputed's
				period += f
				stash, work = satMul(blk.inputs, e.m), satAdd(work, stash)
			}
			at := id*d.W + off + k
			if rec {
				r := fitEntry{max(period+f, link), maxInFlight(satAdd(st, satAdd(work, stash)), satMul(blk.inputs, e.m), limit)}
				if d.recFit[at] = r; r.maxIn >= 1 {
					d.recLeast[id] = min(d.recLeast[id], r.t)
				}
				continue
			}
			keep := maxInFlight(satAdd(st, work), stash, limit)
			d.fit[at] = fitEntry{max(period, link), keep}
			if keep >= 1 {
				d.least[id] = min(d.least[id], d.fit[at].t)
			}
			if d.recAuto && keep < most { // recomputing may hold more (recFit's entry, as it will be)
				if r := maxInFlight(satAdd(st, satAdd(work, stash)), satMul(blk.inputs, e.m), limit); min(r, most) > keep {
					d.recHelp = min(d.recHelp, max(period+f, link))
				}
			}
		}
	}
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
