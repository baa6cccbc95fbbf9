package search

import "github.com/graphpipe/graphpipe/partition"

// Fork absorption (see doc.go): the unit before a parallel kid of a series
// node (a head) shares a stage with the source stage of one of the kid's
// branches. That stage comes first: every other branch, and the rest of its
// own, follow it, so its in-flight count is one more than the largest entry
// below it, which is known only once the branches are planned. The DP
// therefore asks, for growing c, whether the branches can be planned with
// every entry at most c and the head's stage fitting at c+1; the first c
// that works is the least.

// forkSub is a subproblem of fork absorption: sub with every entry at most
// c; the head to place in a source stage at depth c+1 while needHead; and a
// tail (nil: none) to place in a sink stage at depth δ+1 while needTail,
// every other part then feeding that stage, from δ+1.
type forkSub struct {
	sub
	c                  int
	head, tail         *tailSpec
	needHead, needTail bool
}

// base is the δ below the parts that do not host the tail: every part feeds
// the tail's stage when there is one.
func (f forkSub) base() int {
	if f.tail != nil {
		return f.δ + 1
	}
	return f.δ
}

// next is what follows a first part of kids i..p on k1 devices, with what
// is still to place.
func (f forkSub) next(p, k1 int, needHead, needTail bool) forkSub {
	return forkSub{f.after(p, k1), f.c, f.head, f.tail, needHead, needTail}
}

// kidHead is kid i alone on k1 devices, δ after it, placing only the head
// (forkSolve's subproblem).
func (f forkSub) kidHead(k1, δ int) forkSub {
	return forkSub{sub: sub{f.kid(), 0, k1, δ}, c: f.c, head: f.head, needHead: true}
}

// forkKey memoises forkGroup and forkSolve: (node, i, k, flags) and (δ, c,
// head, tail+1) packed, which hashes far faster than a struct of ints.
type forkKey [2]uint64

// key is f's memo key; solve tells forkSolve's from forkGroup's.
func (f forkSub) key(solve bool) forkKey {
	flags := uint64(0)
	for b, on := range []bool{f.needHead, f.needTail, solve} {
		if on {
			flags |= 1 << b
		}
	}
	return forkKey{uint64(f.n.id)<<40 | uint64(f.i)<<20 | uint64(f.k)<<4 | flags,
		uint64(f.δ)<<52 | uint64(f.c)<<40 | uint64(f.head.id)<<20 | uint64(tailID(f.tail)+1)}
}

// forkChoice is how a forkGroup or forkSolve answer was reached: its first
// part's last unit p, devices k1 and role.
type forkChoice struct {
	ok    bool
	p, k1 int
	role  role
}

func tailID(t *tailSpec) int {
	if t == nil {
		return -1
	}
	return t.id
}

// forkGroup says whether kids i.. of parallel node f.n fit on exactly k
// devices with every part's entry at most c and, if needHead, one part's
// source stage absorbing the head at depth c+1 (roleHead, roleHeadKid). With
// a tail, one part's sink stage absorbs it at depth δ+1 (if needTail: not yet
// placed; roleTail, roleTailKid), and every other part feeds that stage, from
// δ+1. Parts that absorb nothing are rolePlain.
func (d *dp) forkGroup(f forkSub) bool {
	if f.k < 1 || f.c >= d.D || d.overfull(f.n, f.i, f.k) {
		return false
	}
	base := f.base()
	if !f.needHead { // the head is placed: what is left is the plain DP's
		if f.tail == nil || !f.needTail {
			return d.group(sub{f.n, f.i, f.k, base}) <= f.c
		}
		return d.groupHost(f.sub, f.tail, true) <= f.c
	}
	key := f.key(false)
	if v, ok := d.forkM[key]; ok {
		return v.ok
	}
	last, i, δ, c, t := f.last(), f.i, f.δ, f.c, f.tail
	ans := forkChoice{}
	rest := func(p, k1 int, needHead, needTail bool) bool {
		if p == last {
			return !needHead && !needTail
		}
		return d.forkGroup(f.next(p, k1, needHead, needTail))
	}
	for p := i; p <= last && !ans.ok; p++ {
		for _, v := range d.devs.kRange(p == last, f.k) {
			if ans.ok {
				break
			}
			k1 := int(v)
			blk := -1
			if p > i {
				blk = f.blk(p)
			}
			// plain
			e := d.part(p == i, blk, k1, base, func() int { return d.solve(f.kid(), k1, base) })
			if e <= c && rest(p, k1, f.needHead, f.needTail) {
				ans = forkChoice{true, p, k1, rolePlain}
				break
			}
			if t != nil && f.needTail {
				union, r := -1, roleTailKid
				if blk >= 0 {
					union, r = t.union(blk), roleTail
				}
				e = d.part(p == i, union, k1, δ, func() int { return d.hostSolve(f.kid(), k1, δ, t) })
				if e <= c && rest(p, k1, f.needHead, false) {
					ans = forkChoice{true, p, k1, r}
					break
				}
			}
			var ok bool
			r := roleHeadKid
			if p == i {
				ok = d.forkSolve(f.kidHead(k1, base))
			} else {
				ok, r = base <= c && d.fits(f.head.union(blk), k1, c+1), roleHead
			}
			if ok && rest(p, k1, false, f.needTail) {
				ans = forkChoice{true, p, k1, r}
			}
		}
	}
	d.forkM[key] = ans
	return ans.ok
}

// part is the entry of one part of a group: a kid planned on its own
// (alone), or block blk as one stage δ+1 from the end.
func (d *dp) part(alone bool, blk, k, δ int, solve func() int) int {
	switch {
	case alone:
		return solve()
	case d.fits(blk, k, δ+1):
		return δ + 1
	}
	return inf
}

// forkSolve says whether node f.n fits on exactly k devices, δ stages after
// it, with the head in its source stage at depth c+1 and every other entry
// at most c: the whole node with the head as one stage (roleWhole), a
// parallel node's group (roleGroup), or a series node's (forkSeries). f is
// a kidHead subproblem: i = 0, no tail.
func (d *dp) forkSolve(f forkSub) bool {
	if f.k < 1 || f.c >= d.D || f.δ+1 > f.c+1 || d.overfull(f.n, 0, f.k) {
		return false
	}
	key := f.key(true)
	if v, ok := d.forkM[key]; ok {
		return v.ok
	}
	ans := forkChoice{}
	switch f.n.kind {
	case partition.Leaf:
		if d.fits(f.head.union(f.n.whole()), f.k, f.c+1) {
			ans = forkChoice{ok: true, role: roleWhole}
		}
	case partition.Parallel:
		if d.forkGroup(f) {
			ans = forkChoice{ok: true, role: roleGroup}
		}
	case partition.Series:
		ans = d.forkSeries(f)
	}
	d.forkM[key] = ans
	return ans.ok
}

// forkSeries is forkSolve on a series node: the whole node with the head
// (roleWhole); or a first interval with it (roleHead) or a first kid
// planned with it (roleHeadKid), the rest after; or a parallel first kid
// hosting the head with later units absorbed into one of its sinks
// (roleFork).
func (d *dp) forkSeries(f forkSub) forkChoice {
	n, k, c, h := f.n, f.k, f.c, f.head
	last := f.last()
	if d.fits(h.union(n.whole()), k, c+1) {
		return forkChoice{true, last, k, roleWhole}
	}
	for p := 0; p < last; p++ {
		for _, v := range d.devs.firstParts(k, true) {
			k1 := int(v)
			after := d.suffix(f.after(p, k1))
			if after > c {
				continue
			}
			if d.fits(h.union(n.blk[0][p]), k1, c+1) {
				return forkChoice{true, p, k1, roleHead}
			}
			if f.kidPlanned(p) && d.forkSolve(f.kidHead(k1, after)) {
				return forkChoice{true, p, k1, roleHeadKid}
			}
		}
	}
	if n.kids[0].kind == partition.Parallel {
		for p := 1; p <= last; p++ {
			t := d.sp.tailAt[[3]int{n.id, 1, p}]
			for _, v := range d.devs.kRange(p == last, k) {
				k1 := int(v)
				after := d.rest(f.sub, p, k1)
				if after <= c && d.forkGroup(forkSub{sub{n.kids[0], 0, k1, after}, c, h, t, true, true}) {
					return forkChoice{true, p, k1, roleFork}
				}
			}
		}
	}
	return forkChoice{}
}

// forkSuffix is suffix's fork absorption at units i.. of series node s.n:
// unit i, before a parallel kid q = i+1, in the source stage of one of its
// branches, perhaps with units after it in another branch's sink (roleFork).
// It returns the fewest in flight it finds below best, and the choice that
// reached it; it stops at floor, below which nothing is.
func (d *dp) forkSuffix(s sub, best, floor int) (int, choice) {
	n, i, δ := s.n, s.i, s.δ
	last := s.last()
	var ch choice
	if q := i + 1; q <= last && best > δ+2 && n.kids[q].kind == partition.Parallel { // unit i is the head
		h := d.sp.headAt[[2]int{n.id, i}]
		if d.headFloor[h.id] > d.T {
			return best, ch // no stage that absorbs the head meets T
		}
		for p := q; p <= last && best > floor; p++ { // p > q: units q+1..p join a branch's sink
			var t *tailSpec
			if p > q {
				if t = d.sp.tailAt[[3]int{n.id, q + 1, p}]; d.tailFloor[t.id] > d.T {
					break // nothing absorbs this tail within T, nor a longer one
				}
			}
			for _, v := range d.devs.kRange(p == last, s.k) {
				if best <= floor {
					break
				}
				k1 := int(v)
				after := d.rest(s, p, k1)
				if after+2 >= best {
					continue // the head's stage holds at least after+2 (c > after), or nothing fits
				}
				// without the head, a plan of the branches holds at most
				// one more than c at its entry: the plain DP's value
				// bounds c from below, and none means no c works
				branches := sub{n.kids[q], 0, k1, after}
				var plain int
				if t == nil {
					plain = d.group(branches)
				} else {
					plain = d.groupHost(branches, t, true)
				}
				if plain >= inf || max(after+1, plain-1)+1 >= best {
					continue
				}
				for c := max(after+1, plain-1); c+1 < best && c < d.D; c++ {
					if d.forkGroup(forkSub{branches, c, h, t, true, t != nil}) {
						best, ch = c+1, choice{p: int16(p), k1: int16(k1), role: roleFork, c: int16(c)}
						break
					}
				}
			}
		}
	}
	return best, ch
}

// extractForkSuffix rebuilds the stages of suffix's roleFork choice ch at s,
// after stages after it.
func (d *dp) extractForkSuffix(s sub, ch choice, after int, out *[]assignment) {
	p, q := int(ch.p), s.i+1
	var t *tailSpec
	if p > q {
		t = d.sp.tailAt[[3]int{s.n.id, q + 1, p}]
	}
	h := d.sp.headAt[[2]int{s.n.id, s.i}]
	d.extractForkGroup(forkSub{sub{s.n.kids[q], 0, int(ch.k1), after}, int(ch.c), h, t, true, t != nil}, out)
}

// extractForkGroup rebuilds the stages of a forkGroup answer.
func (d *dp) extractForkGroup(f forkSub, out *[]assignment) {
	base := f.base()
	if !f.needHead { // the plain DP's choices
		if f.tail == nil || !f.needTail {
			d.extractGroup(sub{f.n, f.i, f.k, base}, out)
		} else {
			d.extractGroupHost(f.sub, f.tail, true, out)
		}
		return
	}
	ch := d.forkM[f.key(false)]
	p, k1 := ch.p, ch.k1
	needHead, needTail := f.needHead, f.needTail
	switch ch.role {
	case rolePlain:
		if p == f.i {
			d.extractSolve(f.kid(), k1, base, out)
		} else {
			*out = append(*out, assignment{f.blk(p), k1, base + 1})
		}
	case roleTailKid:
		d.extractHost(f.kid(), k1, f.δ, f.tail, out)
		needTail = false
	case roleTail:
		*out = append(*out, assignment{f.tail.union(f.blk(p)), k1, f.δ + 1})
		needTail = false
	case roleHeadKid:
		d.extractForkSolve(f.kidHead(k1, base), out)
		needHead = false
	default: // roleHead
		*out = append(*out, assignment{f.head.union(f.blk(p)), k1, f.c + 1})
		needHead = false
	}
	if p < f.last() {
		d.extractForkGroup(f.next(p, k1, needHead, needTail), out)
	}
}

func (d *dp) extractForkSolve(f forkSub, out *[]assignment) {
	ch := d.forkM[f.key(true)]
	n, k, c, h := f.n, f.k, f.c, f.head
	switch ch.role {
	case roleWhole:
		*out = append(*out, assignment{h.union(n.whole()), k, c + 1})
	case roleGroup:
		d.extractForkGroup(f, out)
	case roleHead, roleHeadKid:
		if ch.role == roleHead {
			*out = append(*out, assignment{h.union(n.blk[0][ch.p]), ch.k1, c + 1})
		} else {
			after := d.suffix(f.after(ch.p, ch.k1))
			d.extractForkSolve(f.kidHead(ch.k1, after), out)
		}
		d.extractSuffix(f.after(ch.p, ch.k1), out)
	case roleFork:
		t := d.sp.tailAt[[3]int{n.id, 1, ch.p}]
		after := d.rest(f.sub, ch.p, ch.k1)
		d.extractForkGroup(forkSub{sub{n.kids[0], 0, ch.k1, after}, c, h, t, true, true}, out)
		if ch.p < f.last() {
			d.extractSuffix(f.after(ch.p, ch.k1), out)
		}
	}
}
