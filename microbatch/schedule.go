package microbatch

import (
	"fmt"

	"github.com/graphpipe/graphpipe/partition"
)

// Kind is what an action does.
type Kind byte

const (
	Forward  Kind = 'F'
	Backward Kind = 'B'
	Weight   Kind = 'W'
	Send     Kind = 'S'
	Recv     Kind = 'R'
)

// Dir is what a Send or Recv carries.
type Dir byte

const (
	Act  Dir = 'a' // activations, along the edge
	Grad Dir = 'g' // gradients, against the edge
)

// Action is one step of a stage's list.
type Action struct {
	Kind Kind
	MB   int // micro-batch
	Edge int // Send and Recv: index into Pipeline.Edges
	Dir  Dir // Send and Recv
}

func (a Action) String() string {
	if a.Kind == Send || a.Kind == Recv {
		return fmt.Sprintf("%d%c%c@e%d", a.MB, a.Kind, a.Dir, a.Edge)
	}
	return fmt.Sprintf("%d%c", a.MB, a.Kind)
}

// Pipeline is the shape a schedule is made for.
type Pipeline struct {
	Stages       int
	Edges        [][2]int // (from, to) stage pairs, no duplicates
	MicroBatches int
}

// Schedule is an ordered action list per stage.
type Schedule struct {
	Name  string
	Pipe  Pipeline
	Split bool // backward split into B (inputs) and W (weights)
	// NoFlush: the lists are one steady iteration of a pipeline that is
	// not flushed between iterations (2bw, twobw.go), where a micro-batch
	// index from Pipe.MicroBatches on is the next batch's
	NoFlush bool
	Lists   [][]Action
}

// Depth is 1 + the longest path in stages from each stage to a sink. It
// returns an error if the edges form a cycle or name a missing stage.
func (p Pipeline) Depth() ([]int, error) {
	order, err := p.order()
	if err != nil {
		return nil, err
	}
	d := make([]int, p.Stages)
	for k := len(order) - 1; k >= 0; k-- {
		s := order[k]
		d[s] = 1
		for _, e := range p.Edges {
			if e[0] == s {
				d[s] = max(d[s], 1+d[e[1]])
			}
		}
	}
	return d, nil
}

func (p Pipeline) order() ([]int, error) {
	for _, e := range p.Edges {
		if e[0] < 0 || e[0] >= p.Stages || e[1] < 0 || e[1] >= p.Stages || e[0] == e[1] {
			return nil, fmt.Errorf("edge %v: not an edge between two of %d stages", e, p.Stages)
		}
	}
	order, left := partition.TopoOrder(p.Stages, p.Edges)
	if left != nil {
		return nil, fmt.Errorf("the stage edges form a cycle through stages %v", left)
	}
	return order, nil
}

func (p Pipeline) check() error {
	if p.Stages <= 0 || p.MicroBatches <= 0 {
		return fmt.Errorf("a pipeline needs stages and micro-batches, got %d and %d", p.Stages, p.MicroBatches)
	}
	_, err := p.order()
	return err
}

// in and out list the edge indices into and out of stage s.
func (p Pipeline) in(s int) []int  { return p.edgesWhere(func(e [2]int) bool { return e[1] == s }) }
func (p Pipeline) out(s int) []int { return p.edgesWhere(func(e [2]int) bool { return e[0] == s }) }

func (p Pipeline) edgesWhere(f func([2]int) bool) []int {
	var out []int
	for i, e := range p.Edges {
		if f(e) {
			out = append(out, i)
		}
	}
	return out
}

// lister appends compute actions with their receives and sends around them.
type lister struct {
	p       Pipeline
	split   bool
	s       int
	in, out []int // the stage's edges
	list    []Action
}

func newLister(p Pipeline, s int) *lister {
	l := &lister{p: p, s: s, in: p.in(s), out: p.out(s)}
	l.list = make([]Action, 0, p.MicroBatches*(2+2*len(l.in)+2*len(l.out)))
	return l
}

func (l *lister) forward(mb int) {
	for _, e := range l.in {
		l.list = append(l.list, Action{Kind: Recv, MB: mb, Edge: e, Dir: Act})
	}
	l.list = append(l.list, Action{Kind: Forward, MB: mb})
	for _, e := range l.out {
		l.list = append(l.list, Action{Kind: Send, MB: mb, Edge: e, Dir: Act})
	}
}

func (l *lister) backward(mb int) {
	for _, e := range l.out {
		l.list = append(l.list, Action{Kind: Recv, MB: mb, Edge: e, Dir: Grad})
	}
	l.list = append(l.list, Action{Kind: Backward, MB: mb})
	for _, e := range l.in {
		l.list = append(l.list, Action{Kind: Send, MB: mb, Edge: e, Dir: Grad})
	}
	if l.split {
		l.list = append(l.list, Action{Kind: Weight, MB: mb})
	}
}

// GPipe runs every forward, then every backward, in micro-batch order.
func GPipe(p Pipeline) (*Schedule, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	sch := &Schedule{Name: "gpipe", Pipe: p}
	for s := 0; s < p.Stages; s++ {
		l := newLister(p, s)
		for mb := 0; mb < p.MicroBatches; mb++ {
			l.forward(mb)
		}
		for mb := 0; mb < p.MicroBatches; mb++ {
			l.backward(mb)
		}
		sch.Lists = append(sch.Lists, l.list)
	}
	return sch, nil
}

// OneFOneB is 1F1B generalised to a stage DAG (see the package doc): stage s
// runs 1 + the longest path in stages from s to a sink forwards before its
// first backward.
func OneFOneB(p Pipeline) (*Schedule, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	depth, _ := p.Depth()
	return OneFOneBWarm(p, depth)
}

// OneFOneBWarm is 1F1B where stage s runs warm[s] forwards (at most the
// number of micro-batches) before its first backward, then alternates one
// backward and one forward, then drains. A stage must warm up at least as
// far as each of its successors and at least 1 + its longest path to a sink,
// or the schedule could deadlock.
func OneFOneBWarm(p Pipeline, warm []int) (*Schedule, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	if err := p.checkWarm(warm); err != nil {
		return nil, err
	}
	return oneFOneBWarm(p, warm, nil, nil), nil
}

// OneFOneBWarmFrom is OneFOneBWarm(base.Pipe, warm) for a base schedule that
// OneFOneBWarm (or this) built with baseWarm: a stage whose count is the
// same keeps its list, shared with base (the lists are only read). A search
// that tries many counts, a few stages at a time, builds only what changes.
func OneFOneBWarmFrom(base *Schedule, baseWarm, warm []int) (*Schedule, error) {
	p := base.Pipe
	if len(baseWarm) != p.Stages || len(base.Lists) != p.Stages {
		return nil, fmt.Errorf("warm-up: a base of %d counts and %d lists for %d stages", len(baseWarm), len(base.Lists), p.Stages)
	}
	if err := p.checkWarm(warm); err != nil {
		return nil, err
	}
	return oneFOneBWarm(p, warm, base, baseWarm), nil
}

// oneFOneBWarm builds 1F1B's lists with warm's counts, taking from base the
// lists of the stages whose count baseWarm has too (base may be nil).
func oneFOneBWarm(p Pipeline, warm []int, base *Schedule, baseWarm []int) *Schedule {
	sch := &Schedule{Name: "1f1b", Pipe: p}
	for s := 0; s < p.Stages; s++ {
		if base != nil && min(warm[s], p.MicroBatches) == min(baseWarm[s], p.MicroBatches) {
			sch.Lists = append(sch.Lists, base.Lists[s])
			continue
		}
		l := newLister(p, s)
		for _, a := range oneFOneBOrder(p.MicroBatches, warm[s]) {
			if a.Kind == Forward {
				l.forward(a.MB)
			} else {
				l.backward(a.MB)
			}
		}
		sch.Lists = append(sch.Lists, l.list)
	}
	return sch
}

// checkWarm refuses warm-up counts that could deadlock 1F1B.
func (p Pipeline) checkWarm(warm []int) error {
	if len(warm) != p.Stages {
		return fmt.Errorf("warm-up: %d counts for %d stages", len(warm), p.Stages)
	}
	depth, _ := p.Depth()
	for s, w := range warm {
		if w < depth[s] {
			return fmt.Errorf("warm-up: stage %d runs %d forwards first, fewer than its depth %d", s, w, depth[s])
		}
		for _, e := range p.out(s) {
			if to := p.Edges[e][1]; w < warm[to] {
				return fmt.Errorf("warm-up: stage %d runs %d forwards first, fewer than its successor %d's %d", s, w, to, warm[to])
			}
		}
	}
	return nil
}

// oneFOneBOrder is a 1F1B stage's forwards and backwards in order, m
// micro-batches, w of them forwarded before the first backward.
func oneFOneBOrder(m, w int) []Action {
	w = min(m, w)
	acts := make([]Action, 0, 2*m)
	for mb := 0; mb < w; mb++ {
		acts = append(acts, Action{Kind: Forward, MB: mb})
	}
	for mb := 0; mb < m; mb++ {
		acts = append(acts, Action{Kind: Backward, MB: mb})
		if next := mb + w; next < m {
			acts = append(acts, Action{Kind: Forward, MB: next})
		}
	}
	return acts
}

// New builds the named schedule without durations (ScheduleKind.New).
func New(name string, p Pipeline) (*Schedule, error) {
	k, err := KindOf(name)
	if err != nil {
		return nil, err
	}
	return k.New(p)
}

// NewTimed builds the named schedule for these durations and a per-device
// memory limit in bytes (0: none) (ScheduleKind.NewTimed).
func NewTimed(name string, p Pipeline, t Timing, limit int64) (*Schedule, error) {
	k, err := KindOf(name)
	if err != nil {
		return nil, err
	}
	return k.NewTimed(p, t, limit)
}
