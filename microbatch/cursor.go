package microbatch

import "math"

// Cursor is one stage's place in its action list and the stage's clock by
// the timing model: the deterministic core of a schedule that every
// interpreter drives. Simulate drives one cursor per stage against a
// mailbox of arrivals; ZeroBubble drives one per stage while choosing what
// to append to its list; a runtime worker drives its stage's over the
// network, computing (or, emulating, sleeping until the cursor's times).
// A cursor does no I/O and never waits: its caller brings it the data and
// does the work.
//
// The caller's duties, in a loop:
//
//  1. Call Next for the action at the cursor. When there is none the list
//     is done: call Finish for the stage's flush (gradient all-reduce and
//     optimizer step) and stop.
//  2. A Recv needs the data of its matching Send (same micro-batch, edge
//     and direction, made by the stage at the other end). Until the caller
//     has it the stage is blocked there: a simulator turns to another
//     stage, a worker waits for the message. With it, call Step with when
//     the data landed by the model (the End of the Send's span, step 4), or
//     later where it really came later (a worker); the clock moves up to it,
//     or on by the cost of taking a message (Timing.Take) if that is later.
//  3. A Forward, Backward or Weight: call Step, which returns the action's
//     span on the clock, [start, end), and do the work (compute it, or
//     sleep until end).
//  4. A Send: call Step, which returns the transfer's span on its link
//     (Link.Carry), [start, end) with end when the data lands; deliver the
//     data with end to the stage at the other end (step 2 there). The
//     stage's clock moves on by the send call's cost (Timing.Post). Where
//     a message waits for its sender to stop computing (Timing.Hold), it
//     lands later by the sender's next computing action, up to the hold.
//
// Then go back to 1. A builder that chooses the list as it plays
// (ZeroBubble) calls Do instead of Next and Step: it appends an action and
// steps over it.
//
// Each link, one per edge and direction, has one sending stage, so a
// cursor owns the links its Sends use.
type Cursor struct {
	stage   int
	list    []Action
	pc      int
	split   bool
	f, b, w float64   // this stage's durations (Timing)
	flush   float64   // this stage's flush
	act     []float64 // per edge: activations' transfer time (Timing.Act)
	grad    []float64 // per edge: gradients' transfer time (Timing.Grad)
	post    []float64 // per edge: a send's cost to the sender (Timing.Post; nil: none)
	take    []float64 // per edge: a receive's cost to the receiver (Timing.Take; nil: none)
	hold    []float64 // per edge: the most a message waits for its sender's next computing (Timing.Hold; nil: none)
	links   []Link    // per (edge, dir): linkIndex
	clock   float64   // when the stage is next free
	busy    float64   // compute seconds so far
	held    int       // micro-batches stashed now
	peak    int       // most micro-batches stashed at once
}

// NewCursor is stage s's cursor over its list in sch, the clock at the
// stage's Timing.Begin (0 without), with the durations t.
func NewCursor(sch *Schedule, s int, t Timing) (*Cursor, error) {
	if err := t.check(sch); err != nil {
		return nil, err
	}
	c := newCursor(s, sch.Lists[s], sch.Split, t, make([]Link, 2*len(sch.Pipe.Edges)))
	return &c, nil
}

// newCursor is NewCursor for a checked timing, the cursor's sends using
// links (per (edge, dir), which stages may share: each touches only those
// it sends on).
func newCursor(s int, list []Action, split bool, t Timing, links []Link) Cursor {
	return Cursor{stage: s, list: list, split: split, f: t.F[s], b: t.B[s], w: at(t.W, s), flush: at(t.Flush, s),
		act: t.Act, grad: t.Grad, post: t.Post, take: t.Take, hold: t.Hold, links: links, clock: at(t.Begin, s)}
}

// Next is the action at the cursor; false once the list is done.
func (c *Cursor) Next() (Action, bool) {
	if c.pc == len(c.list) {
		return Action{}, false
	}
	return c.list[c.pc], true
}

// Step performs the action at the cursor by the model, moves past it, and
// returns its span (see the contract above). For a Recv, land is when the
// data landed, and the span is the stage's wait for it: from its clock to
// land, if later. land is not read otherwise. A compute action's span is on
// the stage's clock, a Send's on its link, ending when the data lands.
func (c *Cursor) Step(land float64) (start, end float64) { return c.step(c.list[c.pc], land) }

// Do appends a to the list, at whose end the cursor must be, and steps
// over it: what a builder that chooses the list as it plays calls.
func (c *Cursor) Do(a Action, land float64) (start, end float64) {
	c.list = append(c.list, a)
	return c.step(a, land)
}

func (c *Cursor) step(a Action, land float64) (start, end float64) {
	c.pc++
	switch a.Kind {
	case Recv:
		start = c.clock
		c.clock = max(c.clock+at(c.take, a.Edge), land)
		return start, c.clock
	case Send:
		dur := c.act[a.Edge]
		if a.Dir == Grad {
			dur = c.grad[a.Edge]
		}
		if c.hold != nil {
			dur += min(c.hold[a.Edge], c.nextCompute())
		}
		start, end = c.links[linkIndex(a.Edge, a.Dir)].Carry(c.clock, dur)
		c.clock += at(c.post, a.Edge)
		return start, end
	}
	dur := c.duration(a.Kind)
	start = c.clock
	c.clock += dur
	c.busy += dur
	c.held += stashDelta(a.Kind, c.split)
	c.peak = max(c.peak, c.held)
	return start, c.clock
}

// nextCompute is how long the stage computes next, past the sends at the
// cursor: the compute action's duration, or 0 where it waits for data or
// its list ends first (or a builder has not yet chosen it).
func (c *Cursor) nextCompute() float64 {
	for _, a := range c.list[c.pc:] {
		switch a.Kind {
		case Send:
			continue
		case Recv:
			return 0
		}
		return c.duration(a.Kind)
	}
	return 0
}

// Finish ends the iteration with the stage's flush, and returns its span.
func (c *Cursor) Finish() (start, end float64) {
	start = c.clock
	c.clock += c.flush
	return start, c.clock
}

// List is the stage's action list.
func (c *Cursor) List() []Action { return c.list }

// Clock is when the stage is next free, by the model.
func (c *Cursor) Clock() float64 { return c.clock }

// Busy is the stage's compute seconds so far.
func (c *Cursor) Busy() float64 { return c.busy }

// Held is how many micro-batches the stage holds stashed now (forwarded,
// not yet freed by their backward, or by their W when the backward is
// split); InFlight is the most it held at once.
func (c *Cursor) Held() int     { return c.held }
func (c *Cursor) InFlight() int { return c.peak }

func (c *Cursor) duration(k Kind) float64 {
	switch k {
	case Forward:
		return c.f
	case Backward:
		return c.b
	}
	return c.w
}

func stashDelta(k Kind, split bool) int {
	switch {
	case k == Forward:
		return 1
	case k == Weight, k == Backward && !split:
		return -1
	}
	return 0
}

// Link is one edge's link in one direction: it carries one transfer at a
// time, in the order they were sent. Its zero value is free from time 0.
type Link struct {
	free float64 // when the link is next free
}

// Carry sends a transfer of dur seconds over the link once the sender is
// ready at ready: it starts when both are, and lands at end.
func (l *Link) Carry(ready, dur float64) (start, end float64) {
	start = max(ready, l.free)
	l.free = start + dur
	return start, l.free
}

// linkIndex numbers the links: per edge, activations then gradients.
func linkIndex(e int, d Dir) int {
	if d == Grad {
		return 2*e + 1
	}
	return 2 * e
}

// mailbox holds the transfers of an iteration by the model, per (edge,
// dir, micro-batch): when each was sent and when it lands.
type mailbox struct {
	mbs        int
	sent, land []float64 // NaN until sent; sent only with events
}

func newMailbox(p Pipeline, events bool) mailbox {
	m := mailbox{mbs: p.MicroBatches, land: make([]float64, 2*len(p.Edges)*p.MicroBatches)}
	for i := range m.land {
		m.land[i] = math.NaN()
	}
	if events {
		m.sent = make([]float64, len(m.land))
	}
	return m
}

func (m *mailbox) slot(e int, d Dir, mb int) int { return linkIndex(e, d)*m.mbs + mb }

// put posts a Send of (e, d, mb) sent at start that lands at end.
func (m *mailbox) put(e int, d Dir, mb int, start, end float64) {
	k := m.slot(e, d, mb)
	m.land[k] = end
	if m.sent != nil {
		m.sent[k] = start
	}
}

// lands is when the transfer lands: NaN until it is sent.
func (m *mailbox) lands(e int, d Dir, mb int) float64 { return m.land[m.slot(e, d, mb)] }
