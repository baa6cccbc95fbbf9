package search

import "github.com/graphpipe/graphpipe/partition"

// Join absorption (see doc.go): when a series node's units continue after a
// parallel kid, a run of them (a tail) may share the sink stage of one of
// the kid's branches (the host); every other branch feeds that stage.

// joinSuffix is suffix's join absorption at units i.. of series node s.n,
// where kid i is parallel: its branches with units i+1..p in one branch's
// sink stage (roleJoin). It returns the fewest in flight it finds below
// best, and the choice that reached it; it stops at floor, below which
// nothing is (at least δ+1).
func (d *dp) joinSuffix(s sub, best, floor int) (int, choice) {
	var ch choice
	last := s.last()
	for p := s.i + 1; p <= last && best > floor; p++ {
		t := d.sp.tailAt[[3]int{s.n.id, s.i + 1, p}]
		if d.tailFloor[t.id] > d.T {
			break
		}
		for _, v := range d.devs.kRange(p == last, s.k) {
			if best <= floor {
				break
			}
			k1 := int(v)
			after := d.rest(s, p, k1)
			if after+1 >= best {
				continue // the branches hold more than after, or nothing fits
			}
			if r := d.groupHost(sub{s.kid(), 0, k1, after}, t, true); r < best {
				best, ch = r, choice{p: int16(p), k1: int16(k1), role: roleJoin}
			}
		}
	}
	return best, ch
}

// groupHost covers kids i.. of parallel node s.n where, if need, one part's
// sink stage absorbs tail t: kid i planned with it (roleTailKid) or kids
// i..p and the tail as one stage (roleTail); the other parts are rolePlain.
// The tail's stage sits δ+1 from the end; every other branch feeds it, so
// its exit is δ+1.
func (d *dp) groupHost(s sub, t *tailSpec, need bool) int {
	if s.k < 1 || s.δ+1 >= d.D || d.overfull(s.n, s.i, s.k) {
		return inf
	}
	tab, idx := d.hostGroupIdx(s, t, need)
	if v, ok := d.lookup(tab, idx, s.δ+1); ok {
		return v
	}
	if need && d.noHost(t, s.n) {
		d.store(tab, idx, inf, choice{})
		return inf
	}
	last, δ := s.last(), s.δ
	best, ch := inf, choice{}
	floor := d.floor(tab, idx, δ+1) // no option does better
	consider := func(p, k1 int, first int, r role) {
		if first >= best {
			return
		}
		still := need && r == rolePlain
		rest := 0
		switch {
		case p < last:
			rest = d.groupHost(s.after(p, k1), t, still)
		case still:
			rest = inf
		}
		if v := max(first, rest); v < best {
			best, ch = v, choice{p: int16(p), k1: int16(k1), role: r}
		}
	}
	// a part short of the last kid leaves a part after it, and one of the two
	// feeds the host from δ+2: only the whole group as the host's stage holds
	// δ+1, so past δ+2 only p = last can improve, and past δ+1 nothing
	for p := s.i; p <= last; p++ {
		if best <= floor || p < last && best <= δ+2 {
			continue
		}
		parts := d.devs.kRange(p == last, s.k) // the last part takes every device left
		if p == s.i {
			for _, v := range parts {
				if best <= floor || p < last && best <= δ+2 {
					break
				}
				k1 := int(v)
				if δ+2 < best { // the kid holds more than δ+1
					consider(p, k1, d.solve(s.kid(), k1, δ+1), rolePlain)
				}
				if need {
					consider(p, k1, d.hostSolve(s.kid(), k1, δ, t), roleTailKid)
				}
			}
			continue
		}
		// units i..p as one stage, alone and with the tail; an option
		// whose own stage holds best or more cannot improve (consider)
		blk, union := s.blk(p)*d.W, -1
		if need {
			union = t.union(s.blk(p)) * d.W
		}
		for _, v := range parts {
			if best <= floor || p < last && best <= δ+2 {
				break
			}
			k1 := int(v)
			col := int(d.devs.col[k1])
			if col < 0 {
				continue // a stage's devices are of one kind, at most kmax of it
			}
			if δ+2 < best && d.fitsAt(blk+col, δ+2) {
				consider(p, k1, δ+2, rolePlain)
			}
			if need && δ+1 < best && d.fitsAt(union+col, δ+1) {
				consider(p, k1, δ+1, roleTail)
			}
		}
	}
	d.store(tab, idx, best, ch)
	return best
}

// hostTable returns the lazily allocated absorption table of (tail, node).
func (d *dp) hostTable(tabs [][]*table, t *tailSpec, n *snode, size int) *table {
	if tabs[t.id][n.id] == nil {
		tabs[t.id][n.id] = newTable(size, d.D+1) // δ from 0 to D
	}
	return tabs[t.id][n.id]
}

// hostGroupIdx is groupHost's table and slot. Once the tail is placed
// (need false) every part only feeds its stage, and nothing asks which
// tail that is: the value and its choice are the same for every tail, and
// one table (feedM) holds them for all.
func (d *dp) hostGroupIdx(s sub, t *tailSpec, need bool) (*table, slot) {
	if !need && d.tu.shareFeeds {
		return d.feedM[s.n.id], d.at(s)
	}
	at := d.at(s)
	at.j *= 2
	if need {
		at.j++
	}
	return d.hostTable(d.hostG, t, s.n, len(s.n.kids)*d.devs.n*2), at
}

func (d *dp) hostSuffixIdx(s sub, t *tailSpec) (*table, slot) {
	return d.hostTable(d.hostS, t, s.n, len(s.n.kids)*d.devs.n), d.at(s)
}

// noHost says whether no sink stage of node n (hostBlocks) can absorb
// tail t at T: no union of the two meets T with one micro-batch in flight
// (prices.hostFloor), so that every plan that places the tail there fails.
func (d *dp) noHost(t *tailSpec, n *snode) bool {
	v := 0
	if d.rfit != nil {
		v = 1
	}
	return d.hostFloor[t.id][v][n.id] > d.T
}

// hostSolve is n planned with tail t in its sink stage, δ after the tail.
func (d *dp) hostSolve(n *snode, k, δ int, t *tailSpec) int {
	switch n.kind {
	case partition.Leaf:
		if d.fits(t.union(n.whole()), k, δ+1) {
			return δ + 1
		}
		return inf
	case partition.Series:
		return d.suffixHost(sub{n, 0, k, δ}, t)
	}
	return d.groupHost(sub{n, 0, k, δ}, t, true)
}

// suffixHost is suffix with tail t absorbed into the last interval's stage:
// units i..last and the tail as one stage (roleTail), or, from the last
// unit, its kid planned with the tail (roleTailKid), or a first interval
// before them (rolePlain).
func (d *dp) suffixHost(s sub, t *tailSpec) int {
	if s.k < 1 {
		return inf
	}
	if s.δ >= d.D || d.overfull(s.n, s.i, s.k) {
		return inf
	}
	tab, idx := d.hostSuffixIdx(s, t)
	if v, ok := d.lookup(tab, idx, s.δ+1); ok {
		return v
	}
	if d.noHost(t, s.n) {
		d.store(tab, idx, inf, choice{})
		return inf
	}
	last, δ := s.last(), s.δ
	best, ch := inf, choice{}
	split := max(d.floor(tab, idx, δ+1), δ+2) // as in suffix
	if d.fits(t.union(s.blk(last)), s.k, δ+1) {
		best, ch = δ+1, choice{p: int16(last), k1: int16(s.k), role: roleTail}
	} else if s.kidPlanned(last) {
		if r := d.hostSolve(s.kid(), s.k, δ, t); r < best {
			best, ch = r, choice{p: int16(last), k1: int16(s.k), role: roleTailKid}
		}
	}
	for _, v := range d.devs.firstParts(s.k, true) { // δ+2 at best, as in suffix
		if best <= split {
			break
		}
		k1 := int(v)
		for p := s.i; p < last && best > split; p++ {
			kid := s.kidPlanned(p)
			if !kid && !d.fitsTime(s.blk(p), k1) {
				break // before the rest is solved, as in suffix
			}
			after := d.suffixHost(s.after(p, k1), t)
			if after+1 >= best {
				continue // the first part holds more than after, or nothing fits
			}
			r := inf
			if kid {
				r = d.solve(s.kid(), k1, after)
			} else if d.fits(s.blk(p), k1, after+1) {
				r = after + 1
			}
			if r < best {
				best, ch = r, choice{p: int16(p), k1: int16(k1)}
			}
		}
	}
	d.store(tab, idx, best, ch)
	return best
}

func (d *dp) extractGroupHost(s sub, t *tailSpec, need bool, out *[]assignment) {
	tab, idx := d.hostGroupIdx(s, t, need)
	ch := tab.choice(idx)
	p, k1 := int(ch.p), int(ch.k1)
	switch {
	case ch.role == roleTailKid:
		d.extractHost(s.kid(), k1, s.δ, t, out)
	case p == s.i:
		d.extractSolve(s.kid(), k1, s.δ+1, out)
	case ch.role == roleTail:
		*out = append(*out, assignment{t.union(s.blk(p)), k1, s.δ + 1})
	default:
		*out = append(*out, assignment{s.blk(p), k1, s.δ + 2})
	}
	if p < s.last() {
		d.extractGroupHost(s.after(p, k1), t, need && ch.role == rolePlain, out)
	}
}

func (d *dp) extractHost(n *snode, k, δ int, t *tailSpec, out *[]assignment) {
	switch n.kind {
	case partition.Leaf:
		*out = append(*out, assignment{t.union(n.whole()), k, δ + 1})
	case partition.Series:
		d.extractSuffixHost(sub{n, 0, k, δ}, t, out)
	default:
		d.extractGroupHost(sub{n, 0, k, δ}, t, true, out)
	}
}

func (d *dp) extractSuffixHost(s sub, t *tailSpec, out *[]assignment) {
	tab, idx := d.hostSuffixIdx(s, t)
	ch := tab.choice(idx)
	p, k1 := int(ch.p), int(ch.k1)
	switch ch.role {
	case roleTailKid:
		d.extractHost(s.kid(), s.k, s.δ, t, out)
		return
	case roleTail:
		*out = append(*out, assignment{t.union(s.blk(s.last())), s.k, s.δ + 1})
		return
	}
	after := d.suffixHost(s.after(p, k1), t)
	if s.kidPlanned(p) {
		d.extractSolve(s.kid(), k1, after, out)
	} else {
		*out = append(*out, assignment{s.blk(p), k1, after + 1})
	}
	d.extractSuffixHost(s.after(p, k1), t, out)
}
