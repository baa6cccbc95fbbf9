package search

import "github.com/graphpipe/graphpipe/partition"

// Fork absorption (see doc.go): the unit before a parallel kid of a series
// node (a head) shares a stage with the source stage of one of the kid's
// branches.
// That stage comes first: every other branch, and the rest of its own,
// follow it, so its in-flight count is one more than the largest entry
// below it, which is known only once the branches are planned. The DP
// therefore asks, for growing c, whether the branches can be planned with
// every entry at most c and the head's stage fitting at c+1; the first c
// that works is the least.

// forkKey memoises forkGroup and forkSolve: (node, i, k, flags) and (δ, c,
// head, tail+1) packed, which hashes far faster than a struct of ints.
type forkKey [2]uint64

func newForkKey(node, i, k, δ, c int, h, t *tailSpec, needF, needJ, solve bool) forkKey {
	flags := uint64(0)
	for b, on := range []bool{needF, needJ, solve} {
		if on {
			flags |= 1 << b
		}
	}
	return forkKey{uint64(node)<<40 | uint64(i)<<20 | uint64(k)<<4 | flags,
		uint64(δ)<<52 | uint64(c)<<40 | uint64(h.id)<<20 | uint64(tailID(t)+1)}
}

// forkChoice is how a forkGroup or forkSolve answer was reached.
type forkChoice struct {
	ok    bool
	p, k1 int
	role  byte // forkGroup: 'n' plain, 'j' hosts the tail, 'f' hosts the head; forkSolve: 'w' whole, 'g' a parallel node's group, 's' a first interval, 'k' kid 0 hosts, 'J' kid 0 with a tail
}

func tailID(t *tailSpec) int {
	if t == nil {
		return -1
	}
	return t.id
}

// forkGroup says whether kids i.. of parallel node n fit on exactly k
// devices with every part's entry at most c and, if needF, one part's source
// stage absorbing head h at depth c+1. With a tail t, one part's sink stage
// absorbs it at depth δ+1 (if needJ: not yet placed), and every other part
// feeds that stage, from δ+1.
func (d *dp) forkGroup(n *snode, i, k, δ, c int, h, t *tailSpec, needF, needJ bool) bool {
	if k < 1 || c >= d.D {
		return false
	}
	base := δ
	if t != nil {
		base = δ + 1
	}
	if !needF { // the head is placed: what is left is the plain DP's
		if t == nil || !needJ {
			return d.group(n, i, k, base) <= c
		}
		return d.groupHost(n, i, k, δ, t, true) <= c
	}
	key := newForkKey(n.id, i, k, δ, c, h, t, needF, needJ, false)
	if v, ok := d.forkM[key]; ok {
		return v.ok
	}
	last := len(n.units) - 1
	ans := forkChoice{}
	rest := func(p, k1 int, f, j bool) bool {
		if p == last {
			return !f && !j
		}
		return d.forkGroup(n, p+1, k-k1, δ, c, h, t, f, j)
	}
	for p := i; p <= last && !ans.ok; p++ {
		lo, hi := kRange(p == last, k)
		for k1 := lo; k1 <= hi && !ans.ok; k1++ {
			blk := -1
			if p > i {
				blk = n.blk[i][p-i]
			}
			// plain
			e := d.part(p == i, blk, k1, base, func() int { return d.solve(n.kids[i], k1, base) })
			if e <= c && rest(p, k1, needF, needJ) {
				ans = forkChoice{true, p, k1, 'n'}
				break
			}
			if t != nil && needJ {
				union := -1
				if blk >= 0 {
					union = t.unions[blk]
				}
				e = d.part(p == i, union, k1, δ, func() int { return d.hostSolve(n.kids[i], k1, δ, t) })
				if e <= c && rest(p, k1, needF, false) {
					ans = forkChoice{true, p, k1, 'j'}
					break
				}
			}
			if needF {
				var ok bool
				if p == i {
					ok = d.forkSolve(n.kids[i], k1, base, c, h)
				} else {
					ok = base <= c && d.fits(h.unions[blk], k1, c+1)
				}
				if ok && rest(p, k1, false, needJ) {
					ans = forkChoice{true, p, k1, 'f'}
				}
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

// forkSolve says whether n fits on exactly k devices, δ stages after it,
// with head h in its source stage at depth c+1 and every other entry at most c.
func (d *dp) forkSolve(n *snode, k, δ, c int, h *tailSpec) bool {
	if k < 1 || c >= d.D || δ+1 > c+1 {
		return false
	}
	key := newForkKey(n.id, 0, k, δ, c, h, nil, true, false, true)
	if v, ok := d.forkM[key]; ok {
		return v.ok
	}
	ans := forkChoice{}
	switch n.kind {
	case partition.Leaf:
		if d.fits(h.unions[n.whole()], k, c+1) {
			ans = forkChoice{ok: true, role: 'w'}
		}
	case partition.Parallel:
		if d.forkGroup(n, 0, k, δ, c, h, nil, true, false) {
			ans = forkChoice{ok: true, role: 'g'}
		}
	case partition.Series:
		ans = d.forkSeries(n, k, δ, c, h)
	}
	d.forkM[key] = ans
	return ans.ok
}

// forkSeries is forkSolve on a series node: the whole node with the head;
// or a first interval with it, the rest after; or a parallel first kid
// hosting the head with later units absorbed into one of its sinks.
func (d *dp) forkSeries(n *snode, k, δ, c int, h *tailSpec) forkChoice {
	last := len(n.units) - 1
	if d.fits(h.unions[n.whole()], k, c+1) {
		return forkChoice{true, last, k, 'w'}
	}
	for p := 0; p < last; p++ {
		for k1 := 1; k1 < k && k1 <= d.kmax; k1++ {
			after := d.suffix(n, p+1, k-k1, δ)
			if after > c {
				continue
			}
			if d.fits(h.unions[n.blk[0][p]], k1, c+1) {
				return forkChoice{true, p, k1, 's'}
			}
			if p == 0 && n.kids[0].kind != partition.Leaf && d.forkSolve(n.kids[0], k1, after, c, h) {
				return forkChoice{true, p, k1, 'k'}
			}
		}
	}
	if n.kids[0].kind == partition.Parallel {
		for p := 1; p <= last; p++ {
			t := d.sp.tailAt[[3]int{n.id, 1, p}]
			lo, hi := kRange(p == last, k)
			for k1 := lo; k1 <= hi; k1++ {
				after := d.rest(n, p, k-k1, δ)
				if after <= c && d.forkGroup(n.kids[0], 0, k1, after, c, h, t, true, true) {
					return forkChoice{true, p, k1, 'J'}
				}
			}
		}
	}
	return forkChoice{}
}

// forkSuffix is suffix's fork absorption at units i.. of series node n: unit
// i, before a parallel kid q = i+1, in the source stage of one of its branches,
// perhaps with units after it in another branch's sink. It returns the
// fewest in flight it finds below best, and the choice that reached it.
func (d *dp) forkSuffix(n *snode, i, k, δ, best int) (int, choice) {
	last := len(n.units) - 1
	var ch choice
	if q := i + 1; q <= last && best > δ+2 && n.kids[q].kind == partition.Parallel { // unit i is the head
		h := d.sp.headAt[[2]int{n.id, i}]
		if d.headFloor[h.id] > d.T {
			return best, ch // no stage that absorbs the head meets T
		}
		for p := q; p <= last; p++ { // p > q: units q+1..p join a branch's sink
			var t *tailSpec
			if p > q {
				if t = d.sp.tailAt[[3]int{n.id, q + 1, p}]; d.tailFloor[t.id] > d.T {
					break // nothing absorbs this tail within T, nor a longer one
				}
			}
			lo, hi := kRange(p == last, k)
			for k1 := lo; k1 <= hi; k1++ {
				after := d.rest(n, p, k-k1, δ)
				if after >= inf {
					continue
				}
				// without the head, a plan of the branches holds at most
				// one more than c at its entry: the plain DP's value
				// bounds c from below, and none means no c works
				var plain int
				if t == nil {
					plain = d.group(n.kids[q], 0, k1, after)
				} else {
					plain = d.groupHost(n.kids[q], 0, k1, after, t, true)
				}
				if plain >= inf {
					continue
				}
				for c := max(after+1, plain-1); c+1 < best && c < d.D; c++ {
					if d.forkGroup(n.kids[q], 0, k1, after, c, h, t, true, t != nil) {
						best, ch = c+1, choice{p: int16(p), k1: int16(k1), fork: true, c: int16(c)}
						break
					}
				}
			}
		}
	}
	return best, ch
}

// extractForkGroup rebuilds the stages of a forkGroup answer.
func (d *dp) extractForkGroup(n *snode, i, k, δ, c int, h, t *tailSpec, needF, needJ bool, out *[]assignment) {
	base := δ
	if t != nil {
		base = δ + 1
	}
	if !needF { // the plain DP's choices
		if t == nil || !needJ {
			d.extractGroup(n, i, k, base, out)
		} else {
			d.extractGroupHost(n, i, k, δ, t, true, out)
		}
		return
	}
	ch := d.forkM[newForkKey(n.id, i, k, δ, c, h, t, needF, needJ, false)]
	p, k1 := ch.p, ch.k1
	f, j := needF, needJ
	switch {
	case ch.role == 'n' && p == i:
		d.extractSolve(n.kids[i], k1, base, out)
	case ch.role == 'n':
		*out = append(*out, assignment{n.blk[i][p-i], k1, base + 1})
	case ch.role == 'j' && p == i:
		d.extractHost(n.kids[i], k1, δ, t, out)
		j = false
	case ch.role == 'j':
		*out = append(*out, assignment{t.unions[n.blk[i][p-i]], k1, δ + 1})
		j = false
	case ch.role == 'f' && p == i:
		d.extractForkSolve(n.kids[i], k1, base, c, h, out)
		f = false
	default:
		*out = append(*out, assignment{h.unions[n.blk[i][p-i]], k1, c + 1})
		f = false
	}
	if p < len(n.units)-1 {
		d.extractForkGroup(n, p+1, k-k1, δ, c, h, t, f, j, out)
	}
}

func (d *dp) extractForkSolve(n *snode, k, δ, c int, h *tailSpec, out *[]assignment) {
	ch := d.forkM[newForkKey(n.id, 0, k, δ, c, h, nil, true, false, true)]
	switch ch.role {
	case 'w':
		*out = append(*out, assignment{h.unions[n.whole()], k, c + 1})
	case 'g':
		d.extractForkGroup(n, 0, k, δ, c, h, nil, true, false, out)
	case 's', 'k':
		after := d.suffix(n, ch.p+1, k-ch.k1, δ)
		if ch.role == 's' {
			*out = append(*out, assignment{h.unions[n.blk[0][ch.p]], ch.k1, c + 1})
		} else {
			d.extractForkSolve(n.kids[0], ch.k1, after, c, h, out)
		}
		d.extractSuffix(n, ch.p+1, k-ch.k1, δ, out)
	case 'J':
		t := d.sp.tailAt[[3]int{n.id, 1, ch.p}]
		after := d.rest(n, ch.p, k-ch.k1, δ)
		d.extractForkGroup(n.kids[0], 0, ch.k1, after, c, h, t, true, true, out)
		if ch.p < len(n.units)-1 {
			d.extractSuffix(n, ch.p+1, k-ch.k1, δ, out)
		}
	}
}
