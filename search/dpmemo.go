package search

// The DP's memo tables, and what the bisection over T (dpbottleneck.go)
// carries from one solve to the next.
//
// A solve memoises each subproblem's value at T. Every recurrence's value
// never grows with T: a larger T only adds stages that fit, and each
// recurrence is the least over what fits of values that themselves never
// grow. So while the bisection narrows T to (T_lo, T_hi), the value a
// subproblem had at T_hi bounds its value from below and the value it had
// at T_lo from above. Where the two agree (or the upper one is the least a
// subproblem can be, or the lower one is inf) the value is known without a
// look at the subproblem's options; elsewhere a recurrence stops as soon as
// it reaches the lower bound. The bisection's solves need values only; the
// solve whose choices are extracted pins nothing, so that every entry it
// reaches has its choice, and its recurrences stop at their lower bounds
// only, which leaves each with the first choice in its order that reaches
// its value: the choice it would have without bounds.

// table memoises one recurrence at one node, one slab per δ (stages
// after the subproblem), each allocated when first written: most
// subproblems are asked for at few δ.
type table struct {
	w     int     // entries per slab
	slabs []*slab // per δ
}

// slab holds a table's entries at one δ: values (-1: unknown) and the
// choice that reached each, and, during a bisection, each entry's value at
// the nearest T above (hi) and below (lo) that were solved (-1: unknown).
type slab struct {
	v, hi, lo []int16
	ch        []choice
	id        int32 // its index in memo.slabs
}

// slot names an entry of a table: its δ and its index in that δ's slab.
type slot struct{ δ, j int }

// newTable makes a table of w entries for each δ of 0..depths-1.
func newTable(w, depths int) *table { return &table{w: w, slabs: make([]*slab, depths)} }

// slab returns t's slab of δ, allocating it if need be.
func (m *memo) slab(t *table, δ int) *slab {
	s := t.slabs[δ]
	if s == nil {
		s = &slab{v: make([]int16, t.w), hi: make([]int16, t.w), lo: make([]int16, t.w), ch: make([]choice, t.w), id: int32(len(m.slabs))}
		for i := range s.v {
			s.v[i], s.hi[i], s.lo[i] = -1, -1, -1
		}
		t.slabs[δ] = s
		m.slabs = append(m.slabs, s)
	}
	return s
}

// choice is the choice memoised at a slot, which a solve has filled.
func (t *table) choice(at slot) choice { return t.slabs[at.δ].ch[at.j] }

// memoRef names one entry of one slab, by index: the logs that hold them
// are long and hold no pointers for the garbage collector to scan.
type memoRef struct {
	s, j int32
}

// memo is what the tables of one DP hold: the entries memoised at the
// current T (to forget them at the next reset without clearing every
// table), and the bisection's bounds.
type memo struct {
	slabs   []*slab   // every slab allocated, by id
	touched []memoRef // memoised at T
	bounded []memoRef // with a bound set in this bisection
	// pin: a bisection's solve, which asks for values only: a value its
	// bounds pin is memoised without its choice. useFloors: a recurrence
	// stops at its bound from below (it then has the first choice in its
	// order that reaches its value, as without it). The bisection's solves
	// use both; its last solve, whose choices are extracted, floors alone
	// (useFloors).
	pin, useFloors bool
}

// lookup returns the entry's value at T when it is memoised or, in a
// bisection, known from its bounds (least is the least value the entry can
// have); the value so known is memoised.
func (m *memo) lookup(t *table, at slot, least int) (int, bool) {
	s := t.slabs[at.δ]
	if s == nil {
		return 0, false
	}
	if v := s.v[at.j]; v >= 0 {
		return int(v), true
	}
	if !m.pin {
		return 0, false
	}
	hi, lo := s.hi[at.j], s.lo[at.j]
	switch {
	case hi == inf, hi >= 0 && hi == lo:
		m.put(s, at.j, int(hi), noChoice)
		return int(hi), true
	case lo >= 0 && int(lo) <= least:
		m.put(s, at.j, int(lo), noChoice)
		return int(lo), true
	}
	return 0, false
}

// floor is the least value a recurrence at the entry need look for: least,
// or in a bisection the entry's value at a larger T when that is more.
func (m *memo) floor(t *table, at slot, least int) int {
	if !m.useFloors {
		return least
	}
	if s := t.slabs[at.δ]; s != nil && int(s.hi[at.j]) > least {
		return int(s.hi[at.j])
	}
	return least
}

// noChoice is what a value known from its bounds alone was reached by.
var noChoice = choice{role: noRole}

// store memoises the entry's value at T and the choice that reached it.
func (m *memo) store(t *table, at slot, v int, ch choice) { m.put(m.slab(t, at.δ), at.j, v, ch) }

func (m *memo) put(s *slab, j, v int, ch choice) {
	s.v[j], s.ch[j] = int16(v), ch
	m.touched = append(m.touched, memoRef{s.id, int32(j)})
}

// forget drops every value memoised at T.
func (m *memo) forget() {
	for _, e := range m.touched {
		m.slabs[e.s].v[e.j] = -1
	}
	m.touched = m.touched[:0]
}

// beginBounds starts a bisection: bounds in use where bounded
// (tuning.boundedBisection), none known yet.
func (m *memo) beginBounds(bounded bool) {
	for _, e := range m.bounded {
		s := m.slabs[e.s]
		s.hi[e.j], s.lo[e.j] = -1, -1
	}
	m.bounded = m.bounded[:0]
	m.pin, m.useFloors = bounded, bounded
}

// keepBounds records the values memoised at T as bounds for the rest of
// the bisection: from below if T is above what is left to search (the root
// fit at T), from above otherwise.
func (m *memo) keepBounds(above bool) {
	for _, e := range m.touched {
		s := m.slabs[e.s]
		if above {
			s.hi[e.j] = s.v[e.j]
		} else {
			s.lo[e.j] = s.v[e.j]
		}
	}
	m.bounded = append(m.bounded, m.touched...)
}

// choicesBounds turns pinning off for the bisection's last solve, whose
// choices are extracted: its recurrences still stop at their floors.
func (m *memo) choicesBounds() { m.pin = false }

// endBounds ends a bisection: the next solves run without bounds.
func (m *memo) endBounds() { m.pin, m.useFloors = false, false }
