package search

// group covers kids i.. of parallel node s.n side by side: kids i..p merged
// into one stage (or kid i planned on its own) on k1 devices, the rest on
// k-k1 (rolePlain); the value is the larger of the two parts'.
func (d *dp) group(s sub) int {
	if d.overfull(s.n, s.i, s.k) {
		return inf
	}
	idx := d.at(s)
	tab := d.groupM[s.n.id]
	if v, ok := d.lookup(tab, idx, s.δ+1); ok {
		return v
	}
	last, δ := s.last(), s.δ
	best, ch := inf, choice{}
	floor := d.floor(tab, idx, δ+1) // no option does better
	try := func(p, k1 int) (stop bool) {
		first := inf
		switch {
		case p == s.i:
			first = d.solve(s.kid(), k1, δ)
		case d.fits(s.blk(p), k1, δ+1):
			first = δ + 1
		case !d.fitsTime(s.blk(p), k1):
			return true
		}
		if first >= best {
			return false
		}
		rest := 0
		if p < last {
			rest = d.group(s.after(p, k1))
		}
		if r := max(first, rest); r < best {
			best, ch = r, choice{p: int16(p), k1: int16(k1)}
		}
		return false
	}
	try(last, s.k)
	for _, v := range d.devs.firstParts(s.k, true) {
		if best <= floor {
			break
		}
		k1 := int(v)
		for p := s.i; p < last && best > floor; p++ {
			if try(p, k1) {
				break
			}
		}
	}
	d.store(tab, idx, best, ch)
	return best
}

func (d *dp) extractGroup(s sub, out *[]assignment) {
	ch := d.groupM[s.n.id].choice(d.at(s))
	p, k1 := int(ch.p), int(ch.k1)
	if p == s.i {
		d.extractSolve(s.kid(), k1, s.δ, out)
	} else {
		*out = append(*out, assignment{s.blk(p), k1, s.δ + 1})
	}
	if p < s.last() {
		d.extractGroup(s.after(p, k1), out)
	}
}
