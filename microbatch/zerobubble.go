package microbatch

import (
	"fmt"
	"math"
)

// ZeroBubble is 1F1B with the backward split, generalised to a stage DAG:
// the input-gradient half (B) stays on the critical path in 1F1B's order,
// and the weight-gradient half (W) of each micro-batch is deferred into the
// time its stage would otherwise wait (Zero Bubble's H1 idea: the cool-down
// drains at the speed of B alone while W fills the gaps). A stage holds no
// more micro-batches than 1F1B with the same warm-up would (a micro-batch's
// stash is freed by its W): before a forward that would exceed warm[s] it
// runs its oldest pending W.
//
// The lists are made by playing the schedule forward in time with the
// durations t (which must give W): whenever a stage is free, it runs the
// next F or B of its 1F1B order if that action's data is there, else its
// oldest pending W, else it waits. warm is as OneFOneBWarm takes it.
func ZeroBubble(p Pipeline, t Timing, warm []int) (*Schedule, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	if err := p.checkWarm(warm); err != nil {
		return nil, err
	}
	sch := &Schedule{Name: "zb", Pipe: p, Split: true}
	if err := t.check(&Schedule{Pipe: p, Split: true, Lists: make([][]Action, p.Stages)}); err != nil {
		return nil, err
	}
	z := newZB(p, t, warm)
	if err := z.run(); err != nil {
		return nil, err
	}
	for s := range z.cur {
		sch.Lists = append(sch.Lists, z.cur[s].List())
	}
	return sch, nil
}

// zb is the state of ZeroBubble's playout: the policy (which action next)
// over one cursor per stage, which keeps the clocks, links and stash counts.
type zb struct {
	p       Pipeline
	in, out [][]int    // per stage: the edges into and out of it
	order   [][]Action // per stage: its F and B in 1F1B order
	next    []int      // per stage: index into order
	pending [][]int    // per stage: micro-batches whose W is due, oldest first
	limit   []int      // per stage: the most it may hold, 1F1B's warm-up
	cur     []Cursor   // per stage: its list so far, stepped through
	box     mailbox
}

func newZB(p Pipeline, t Timing, warm []int) *zb {
	n, m := p.Stages, p.MicroBatches
	z := &zb{p: p, next: make([]int, n), pending: make([][]int, n), limit: make([]int, n), cur: make([]Cursor, n),
		box: newMailbox(p, false)}
	links := make([]Link, 2*len(p.Edges))
	for s := 0; s < n; s++ {
		z.order = append(z.order, oneFOneBOrder(m, warm[s]))
		z.limit[s] = min(m, warm[s])
		z.in, z.out = append(z.in, p.in(s)), append(z.out, p.out(s))
		list := make([]Action, 0, m*(3+2*len(z.in[s])+2*len(z.out[s])))
		z.cur[s] = newCursor(s, list, true, t, links)
	}
	return z
}

// ready is when the data of stage s's next F or B is all there: +Inf while
// some of it has not been sent, NaN when nothing is left in its order.
func (z *zb) ready(s int) float64 {
	if z.next[s] == len(z.order[s]) {
		return math.NaN()
	}
	a := z.order[s][z.next[s]]
	edges, dir := z.in[s], Act
	if a.Kind == Backward {
		edges, dir = z.out[s], Grad
	}
	at := 0.0
	for _, e := range edges {
		v := z.box.lands(e, dir, a.MB)
		if math.IsNaN(v) {
			return math.Inf(1)
		}
		at = max(at, v)
	}
	return at
}

// when is the time stage s acts next: +Inf if it must wait for data not yet
// sent, NaN if it is done.
func (z *zb) when(s int) float64 {
	r := z.ready(s)
	switch {
	case math.IsNaN(r) && len(z.pending[s]) == 0:
		return math.NaN()
	case len(z.pending[s]) > 0:
		return z.cur[s].Clock()
	}
	return max(z.cur[s].Clock(), r)
}

// run steps the stage that acts first (the lowest on ties) until every stage
// is done. A stage's next time changes only when it acts or a neighbour sends
// it data, so only those are recomputed.
func (z *zb) run() error {
	due := make([]float64, len(z.cur))
	for s := range due {
		due[s] = z.when(s)
	}
	for {
		s, at := -1, math.Inf(1)
		done := true
		for st, w := range due {
			if math.IsNaN(w) {
				continue
			}
			done = false
			if w < at {
				s, at = st, w
			}
		}
		if done {
			return nil
		}
		if s < 0 {
			return fmt.Errorf("zero-bubble schedule: every unfinished stage waits for data never sent")
		}
		z.step(s, at)
		due[s] = z.when(s)
		for _, e := range z.in[s] {
			due[z.p.Edges[e][0]] = z.when(z.p.Edges[e][0])
		}
		for _, e := range z.out[s] {
			due[z.p.Edges[e][1]] = z.when(z.p.Edges[e][1])
		}
	}
}

// step runs stage s's next action, due at: the next F or B of its order if
// its data is there by then and it may hold another micro-batch, else its
// oldest pending W.
func (z *zb) step(s int, at float64) {
	c := &z.cur[s]
	r := z.ready(s)
	if !math.IsNaN(r) && r <= at {
		a := z.order[s][z.next[s]]
		if a.Kind == Backward || c.Held() < z.limit[s] || len(z.pending[s]) == 0 {
			z.next[s]++
			z.compute(s, a)
			return
		}
	}
	mb := z.pending[s][0]
	z.pending[s] = z.pending[s][1:]
	c.Do(Action{Kind: Weight, MB: mb}, 0)
}

// compute does a forward or input-gradient backward with its receives
// before and sends after on the stage's cursor.
func (z *zb) compute(s int, a Action) {
	c := &z.cur[s]
	in, out, dir := z.in[s], z.out[s], Act
	if a.Kind == Backward {
		in, out, dir = out, in, Grad
	}
	for _, e := range in {
		c.Do(Action{Kind: Recv, MB: a.MB, Edge: e, Dir: dir}, z.box.lands(e, dir, a.MB))
	}
	c.Do(a, 0)
	for _, e := range out {
		start, end := c.Do(Action{Kind: Send, MB: a.MB, Edge: e, Dir: dir}, 0)
		z.box.put(e, dir, a.MB, start, end)
	}
	if a.Kind == Backward {
		z.pending[s] = append(z.pending[s], a.MB)
	}
}
