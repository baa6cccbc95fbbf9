package search

import "github.com/graphpipe/graphpipe/partition"

// solve is the fewest in flight at the entry of n on exactly k devices with δ
// stages after it: δ+1 if all of n fits as one stage (roleWhole), else its
// series suffix (roleSeries) or parallel group (roleGroup) from 0.
func (d *dp) solve(n *snode, k, δ int) int {
	if k < 1 || δ >= d.D || d.overfull(n, 0, k) {
		return inf
	}
	idx := slot{δ, k}
	tab := d.solveM[n.id]
	if v, ok := d.lookup(tab, idx, δ+1); ok {
		return v
	}
	best, ch := inf, choice{k1: int16(k), role: roleWhole}
	switch {
	case d.fits(n.whole(), k, δ+1):
		best = δ + 1
	case n.kind == partition.Series:
		best = d.suffix(sub{n, 0, k, δ})
		ch.role = roleSeries
	case n.kind == partition.Parallel:
		best = d.group(sub{n, 0, k, δ})
		ch.role = roleGroup
	}
	d.store(tab, idx, best, ch)
	return best
}

// suffix covers units i.. of series node s.n: a first stage of units i..p
// (or kid i planned on its own) on k1 devices, then the rest on k-k1
// (rolePlain); kid i's branches with units i+1..p in one branch's sink
// (roleJoin, dpjoin.go); or unit i in a source stage of kid i+1 (roleFork,
// dpfork.go). The last interval takes every device left.
func (d *dp) suffix(s sub) int {
	if d.overfull(s.n, s.i, s.k) {
		return inf
	}
	idx := d.at(s)
	tab := d.suffixM[s.n.id]
	if v, ok := d.lookup(tab, idx, s.δ+1); ok {
		return v
	}
	last, δ := s.last(), s.δ
	best, ch := inf, choice{}
	floor := d.floor(tab, idx, δ+1) // no option does better
	stages := d.stagesAt(s.n)       // nil unless n is a series of leaves
	if stages != nil {
		if stages[s.i] >= inf {
			d.store(tab, idx, inf, ch) // no run of stages covers the units
			return inf
		}
		floor = max(floor, δ+int(stages[s.i]))
		if d.tu.deviceBounds { // a chain's stages run one after another, as many as its devices need at least
			floor = max(floor, δ+int(d.devs.need[s.k]))
		}
	}
	// try prices units i..p on k1 devices; stop reports that longer intervals
	// cannot meet T either.
	try := func(p, k1 int) (stop bool) {
		kid := s.kidPlanned(p)
		if !kid && !d.fitsTime(s.blk(p), k1) {
			return true // checked before the rest is solved: most intervals stop here
		}
		after := d.rest(s, p, k1)
		if after >= inf {
			return false
		}
		r := inf
		switch {
		case kid:
			r = d.solve(s.kid(), k1, after)
		case d.fits(s.blk(p), k1, after+1):
			r = after + 1
		}
		if r < best {
			best, ch = r, choice{p: int16(p), k1: int16(k1)}
		}
		return false
	}
	try(last, s.k)
	// a first interval short of the last unit has a stage after it, so it
	// holds at least δ+2: once best is δ+2 no split can improve it
	split := max(floor, δ+2)
	if best > split {
		best, ch = d.splits(s, best, ch, split, stages)
	}
	if s.kid().kind == partition.Parallel && best > floor {
		if r, jch := d.joinSuffix(s, best, floor); r < best {
			best, ch = r, jch
		}
	}
	if best > split {
		if r, fch := d.forkSuffix(s, best, floor); r < best {
			best, ch = r, fch
		}
	}
	d.store(tab, idx, best, ch)
	return best
}

// splits is suffix's loop over a first interval of units i..p short of the
// last unit (or kid i planned on its own) on k1 devices, the rest after it,
// from k1 = 1 and p = i up, until best is floor. It returns the least value
// below best and the first choice (in that order) that reaches it. It is
// the planner's innermost loop, written out: the rest's value is read from
// its table where it is memoised (unit p+1 of the rest sits next to unit p),
// and not solved where the stages it needs (stages, when n is a series of
// leaves) or its value at a larger T (in a bisection) leave it no room
// below best.
func (d *dp) splits(s sub, best int, ch choice, floor int, stages []int16) (int, choice) {
	n, last, δ := s.n, s.last(), s.δ
	row := n.blk[s.i] // row[p-i]: the block of units i..p
	tab := d.suffixM[n.id]
	kid := s.kid().kind != partition.Leaf // unit i is kid i, planned on its own
	var vals, his []int16                 // the suffixes at δ, where memoised, and their bounds from below
	if sl := tab.slabs[δ]; sl != nil {
		vals, his = sl.v, sl.hi
	}
	for _, v := range d.devs.firstParts(s.k, true) {
		if best <= floor {
			break
		}
		k1 := int(v)
		rest := sub{n, 0, s.k - k1, δ}
		base := d.at(rest).j // the rest from unit j is at base+j
		p := s.i
		if kid && p < last {
			rest.i = p + 1
			if after := d.suffix(rest); after+1 < best { // the kid holds more than after
				if r := d.solve(s.kid(), k1, after); r < best {
					best, ch = r, choice{p: int16(p), k1: int16(k1)}
				}
			}
			p++
		}
		col := int(d.devs.col[k1])
		if col < 0 {
			continue // a stage's devices are of one kind, at most kmax of it
		}
		if stages != nil && d.tu.deviceBounds && δ+1+int(d.devs.need[s.k-k1]) >= best {
			continue // the rest's devices make too many stages, one after another
		}
		for ; p < last && best > floor; p++ {
			if d.overfull(n, p+1, s.k-k1) {
				break // the rest has more devices than it can use, and a shorter rest too
			}
			at := row[p-s.i]*d.W + col
			if e := &d.bounds()[at]; e.t > d.T || e.maxIn < 1 {
				break // longer intervals cannot meet T either
			}
			if stages != nil && δ+1+int(stages[p+1]) >= best {
				continue // the rest needs too many stages
			}
			after := -1
			if vals != nil {
				after = int(vals[base+p+1])
				if after < 0 && d.useFloors && int(his[base+p+1])+1 >= best {
					continue // the rest alone holds too many: no need to solve it
				}
			}
			if after < 0 {
				rest.i = p + 1
				after = d.suffix(rest)
				if sl := tab.slabs[δ]; sl != nil {
					vals, his = sl.v, sl.hi
				}
			}
			if after+1 < best && d.fitsAt(at, after+1) {
				best, ch = after+1, choice{p: int16(p), k1: int16(k1)}
			}
		}
	}
	return best, ch
}

// stagesAt is, for a series node of leaves, the fewest stages that cover
// its units from each one on at T, as suffix may cut them (runTimes),
// whatever their devices and memory: a bound from below on suffix's value
// less δ (inf where none does); nil for other nodes.
func (d *dp) stagesAt(n *snode) []int16 {
	r := d.runs[n.id]
	if r == nil {
		return nil
	}
	if d.stages == nil {
		d.stages = make([][]int16, len(d.sp.nodes))
	}
	if st := d.stages[n.id]; st != nil {
		return st
	}
	u := len(n.units)
	st := make([]int16, u+1) // st[u]: nothing left
	for a := u - 1; a >= 0; a-- {
		if r.last[a] <= d.T {
			st[a] = 1
			continue
		}
		fewest := int16(inf)
		for q, t := range r.reach[a][:u-1-a] { // a first interval short of the last unit
			if t > d.T {
				break
			}
			fewest = min(fewest, st[a+q+1])
		}
		if st[a] = inf; fewest < inf {
			st[a] = fewest + 1
		}
	}
	d.stages[n.id] = st
	return st
}

// rest is the depth of series node s.n's units after p when a first part of
// units i..p takes k1 devices: δ when p is the last unit, else the best
// suffix from p+1 on the devices left.
func (d *dp) rest(s sub, p, k1 int) int {
	if p == s.last() {
		return s.δ
	}
	return d.suffix(s.after(p, k1))
}

func (d *dp) extractSolve(n *snode, k, δ int, out *[]assignment) {
	switch d.solveM[n.id].choice(slot{δ, k}).role {
	case roleWhole:
		*out = append(*out, assignment{n.whole(), k, δ + 1})
	case roleSeries:
		d.extractSuffix(sub{n, 0, k, δ}, out)
	case roleGroup:
		d.extractGroup(sub{n, 0, k, δ}, out)
	}
}

func (d *dp) extractSuffix(s sub, out *[]assignment) {
	ch := d.suffixM[s.n.id].choice(d.at(s))
	p, k1 := int(ch.p), int(ch.k1)
	after := d.rest(s, p, k1)
	switch {
	case ch.role == roleFork:
		d.extractForkSuffix(s, ch, after, out)
	case ch.role == roleJoin:
		d.extractGroupHost(sub{s.kid(), 0, k1, after}, d.sp.tailAt[[3]int{s.n.id, s.i + 1, p}], true, out)
	case s.kidPlanned(p):
		d.extractSolve(s.kid(), k1, after, out)
	default:
		*out = append(*out, assignment{s.blk(p), k1, after + 1})
	}
	if p < s.last() {
		d.extractSuffix(s.after(p, k1), out)
	}
}
