package search

import (
	"fmt"
	"math"
	"strings"

	"github.com/graphpipe/graphpipe/partition"
	"github.com/graphpipe/graphpipe/plan"
)

// The DP of gpp and spp (see doc.go), one file per part:
//
//	dp.go           its state: prices, what fits, memo tables, subproblems
//	dpseries.go     solve and suffix: a node, and a series node's units i..
//	dpparallel.go   group: a parallel node's kids i.. side by side
//	dpjoin.go       join absorption: a tail in one branch's sink stage
//	dpfork.go       fork absorption: a head in one branch's source stage
//	dpbottleneck.go the search over the bottleneck T that drives them
//	recompute.go    the stages' second variant, recomputing their forward
//	sizes.go        a planner: the DP at every micro-batch size, the frontier
//
// Every recurrence is memoised per target time T and answers with the
// fewest micro-batches in flight at its subproblem's entry; its extract*
// twin rebuilds the stages of that answer from the choices it memoised.

const inf = math.MaxInt16

// dp answers, for a target time T per micro-batch, the fewest micro-batches
// in flight at the entry of each subproblem (its depth in stages, plus the
// depth after it), or inf when nothing fits.
type dp struct {
	*prices
	T       float64
	hint    float64    // where leastT looks first (0: the candidates' median), once
	solved  bool       // the memo holds values at T (reset), until the fits change (allowRecompute)
	solveM  []*table   // [node], index k·(D+1)+δ
	suffixM []*table   // [node], index at(sub)
	groupM  []*table   // [node], as suffixM
	hostG   [][]*table // [tail][node]: groupHost, index as suffixM, ×2 for need
	feedM   []*table   // [node]: groupHost with no tail left to place, whatever the tail (as suffixM)
	hostS   [][]*table // [tail][node]: suffixHost, index as suffixM
	memo               // what the tables hold at T, and what the bisection knows (dpmemo.go)
	ts      []float64  // candidates(), once computed
	capped  bool       // minTBelow may make only budget more solves
	budget  int
	forkM   map[forkKey]forkChoice // fork absorption's answers at T (dpfork.go)
	// stages is, per series node of leaves, the fewest stages its units
	// from each on need at T (stagesAt); nil until asked at T
	stages [][]int16

	// rfit is recFit when the DP may choose to recompute (recompute.go);
	// nil otherwise
	rfit []fitEntry
}

// sub names a subproblem of the recurrences over a node's parts: the units
// (series node) or kids (parallel node) of n from the i-th on, on exactly k
// devices (counted in groups of dp.g), with δ stages after them.
type sub struct {
	n       *snode
	i, k, δ int
}

// last is the index of n's last unit.
func (s sub) last() int { return len(s.n.units) - 1 }

// blk is the block of units i..p as one stage.
func (s sub) blk(p int) int { return s.n.blk[s.i][p-s.i] }

// kid is the i-th kid of n.
func (s sub) kid() *snode { return s.n.kids[s.i] }

// kidPlanned says whether units i..p are kid i planned on its own (its own
// subproblem) rather than one stage: a single unit that is not a leaf.
func (s sub) kidPlanned(p int) bool { return p == s.i && s.kid().kind != partition.Leaf }

// after is what follows a first part of units i..p on k1 devices: units
// p+1.. on the devices left, δ after them.
func (s sub) after(p, k1 int) sub { return sub{s.n, p + 1, s.k - k1, s.δ} }

// role names how a memoised answer was reached: what its first part is.
// Which roles a recurrence stores is said where it stores them.
type role uint8

const (
	rolePlain   role = iota // units i..p as one stage, or kid i planned on its own
	roleWhole               // the whole node as one stage
	roleSeries              // a series node: its suffix from unit 0
	roleGroup               // a parallel node: its group from kid 0
	roleJoin                // kid i (parallel) with units i+1..p in one branch's sink stage
	roleFork                // a parallel kid with the head in a branch's source stage and later units in a sink
	roleTail                // units i..p and the tail as one stage
	roleTailKid             // kid i planned with the tail in its sink stage
	roleHead                // the head and units i..p as one stage
	roleHeadKid             // kid i planned with the head in its source stage
	noRole                  // none: a value known from the bisection's bounds (dpmemo.go)
)

// choice is the answer a recurrence memoised: its first part's last unit p,
// devices k1 and role; c is fork absorption's bound on every entry but the
// head's stage (roleFork in suffix).
type choice struct {
	p, k1 int16
	role  role
	c     int16
}

// fitEntry is a stage's binding time and memory terms, for the hot check.
type fitEntry struct {
	t     float64 // max(period, link)
	maxIn int     // the most micro-batches in flight that fit in memory (maxInFlight)
}

// dpGroup is the devices per group for the DP: 1 up to most devices (the
// most it tells apart: tuning.maxDPDevices), else the least group size that
// makes at most most groups, or a little more where that divides the
// devices evenly (at most twice as large).
func dpGroup(devices, most int) int {
	if devices <= most {
		return 1
	}
	lo := (devices + most - 1) / most
	for g := lo; g <= 2*lo; g++ {
		if devices%g == 0 {
			return g
		}
	}
	return lo
}

func newDP(sp *space, devices int, b int64, mbs int, gpipe bool) *dp {
	return &dp{prices: newPrices(sp.cm, sp, devices, b, mbs, gpipe)}
}

// reset sets the target time and forgets every memoised value.
func (d *dp) reset(T float64) {
	d.T, d.solved = T, true
	if d.forkM == nil {
		d.forkM = map[forkKey]forkChoice{}
	}
	clear(d.forkM)
	clear(d.stages)
	if d.solveM == nil {
		n, w, depths := len(d.sp.nodes), d.devs.n, d.D+1
		d.solveM, d.suffixM, d.groupM, d.feedM = make([]*table, n), make([]*table, n), make([]*table, n), make([]*table, n)
		for _, nd := range d.sp.nodes {
			d.solveM[nd.id] = newTable(w, depths)
			if len(nd.kids) > 0 {
				d.suffixM[nd.id] = newTable(len(nd.kids)*w, depths)
				d.groupM[nd.id] = newTable(len(nd.kids)*w, depths)
				d.feedM[nd.id] = newTable(len(nd.kids)*w, depths)
			}
		}
		d.hostG, d.hostS = make([][]*table, len(d.sp.tails)), make([][]*table, len(d.sp.tails))
		for t := range d.sp.tails {
			d.hostG[t], d.hostS[t] = make([]*table, n), make([]*table, n)
		}
		return
	}
	d.forget()
}

// at is the slot of subproblem s in its node's suffix, group and host
// tables: unit innermost, because a split's loops walk the units after it at
// one device count.
func (d *dp) at(s sub) slot { return slot{s.δ, s.k*len(s.n.kids) + s.i} }

func (d *dp) inflight(depth int) int {
	if d.gpipe {
		return d.mbs
	}
	return min(d.mbs, depth)
}

// overfull says whether k's devices are more than units i.. of n can use
// (devSets.overfull): every subproblem on exactly them is inf.
func (d *dp) overfull(n *snode, i, k int) bool {
	return d.tu.deviceBounds && d.devs.overfull(n, i, k)
}

// fits says whether block id on the devices of set k (devsets.go: one
// kind's, for a stage), depth stages from the end, runs within T and fits
// in memory, keeping its activations or, where the DP may choose it,
// recomputing them.
func (d *dp) fits(id, k, depth int) bool {
	at := d.fitIndex(id, k)
	return at >= 0 && d.fitsAt(at, depth)
}

// fitIndex is block id's entry in fit on the devices of set k, or -1 where
// it has none (no devices, devices of several kinds, more than kmax).
func (d *prices) fitIndex(id, k int) int {
	if k < 1 || k >= len(d.devs.col) {
		return -1
	}
	c := d.devs.col[k]
	if c < 0 {
		return -1
	}
	return id*d.W + int(c)
}

// fitsAt is fits of the block and device count packed at index at of fit.
func (d *dp) fitsAt(at, depth int) bool {
	in := d.inflight(depth)
	if e := &d.fit[at]; e.t <= d.T && in <= e.maxIn {
		return true
	}
	if d.rfit == nil {
		return false
	}
	e := &d.rfit[at]
	return e.t <= d.T && in <= e.maxIn
}

// fitsTime says whether a block meets T and its memory floor, ignoring depth.
func (d *dp) fitsTime(id, k int) bool {
	at := d.fitIndex(id, k)
	if at < 0 {
		return false
	}
	e := &d.bounds()[at]
	return e.t <= d.T && e.maxIn >= 1
}

// assignment is one stage of a solution: a block, its devices and its depth
// as the DP counted it.
type assignment struct {
	block, k, depth int
}

// extract rebuilds the stages of the solution at the root after a solve.
func (d *dp) extract(root *snode, k int) []assignment {
	var out []assignment
	d.extractSolve(root, k, 0, &out)
	return out
}

// noteGroups says, in each plan's notes, when the DP counted devices in groups.
func (d *dp) noteGroups(plans []*plan.Plan) {
	if d.devs.kinds() > 1 {
		var groups []string
		for t, g := range d.devs.g {
			if g > 1 {
				groups = append(groups, fmt.Sprintf("%s in groups of %d", d.kinds[t].dev.Name, g))
			}
		}
		if len(groups) > 0 {
			for _, p := range plans {
				p.Search.Notes = append(p.Search.Notes, fmt.Sprintf("devices planned %s: every stage takes whole groups (at most %d sets of devices)", strings.Join(groups, ", "), maxDeviceSets))
			}
		}
		return
	}
	if d.g == 1 {
		return
	}
	for _, p := range plans {
		p.Search.Notes = append(p.Search.Notes, fmt.Sprintf("devices planned in groups of %d (%d groups): past %d devices every stage takes whole groups", d.g, d.D, d.tu.maxDPDevices))
	}
}
