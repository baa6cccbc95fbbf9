package microbatch

import "fmt"

// CheckError is a schedule that breaks a rule, naming the stage and action.
type CheckError struct {
	Stage int
	Msg   string
}

func (e *CheckError) Error() string { return fmt.Sprintf("schedule: stage %d: %s", e.Stage, e.Msg) }

// Check verifies a schedule: every stage runs F, B (and W when split) once per
// micro-batch in that order; each forward is preceded by the receipt of its
// activations on every in-edge and followed by their sends on every out-edge,
// and each backward likewise for gradients; the schedule does not deadlock;
// and, if limit is not nil, no stage holds more than limit[s] micro-batches.
// A schedule without a flush is checked across its iterations' boundaries
// (checkNoFlush).
func Check(sch *Schedule, limit []int) error {
	if err := sch.Pipe.check(); err != nil {
		return err
	}
	if len(sch.Lists) != sch.Pipe.Stages {
		return fmt.Errorf("schedule: %d action lists for %d stages", len(sch.Lists), sch.Pipe.Stages)
	}
	if sch.NoFlush {
		return checkNoFlush(sch, limit)
	}
	for s := range sch.Lists {
		if err := checkStage(sch, s); err != nil {
			return err
		}
	}
	res, err := Summarize(sch, Unit(sch.Pipe))
	if err != nil {
		return err
	}
	for s, n := range res.InFlight {
		if limit != nil && n > limit[s] {
			return &CheckError{s, fmt.Sprintf("holds %d micro-batches in flight, more than its limit of %d", n, limit[s])}
		}
	}
	return nil
}

// checkStage checks one stage's list: every action in range, once, in order.
func checkStage(sch *Schedule, s int) error {
	p := sch.Pipe
	pos := map[Action]int{}
	for i, a := range sch.Lists[s] {
		if a.MB < 0 || a.MB >= p.MicroBatches {
			return &CheckError{s, fmt.Sprintf("action %v: micro-batch out of range", a)}
		}
		if _, dup := pos[a]; dup {
			return &CheckError{s, fmt.Sprintf("action %v appears twice", a)}
		}
		switch a.Kind {
		case Forward, Backward:
		case Weight:
			if !sch.Split {
				return &CheckError{s, fmt.Sprintf("action %v in a schedule that does not split backward", a)}
			}
		case Send, Recv:
			if a.Edge < 0 || a.Edge >= len(p.Edges) {
				return &CheckError{s, fmt.Sprintf("action %v: no such edge", a)}
			}
			e := p.Edges[a.Edge]
			mine := e[0] // activations leave from, gradients arrive at, the edge's source
			if (a.Kind == Send) != (a.Dir == Act) {
				mine = e[1]
			}
			if mine != s {
				return &CheckError{s, fmt.Sprintf("action %v belongs to stage %d", a, mine)}
			}
		default:
			return &CheckError{s, fmt.Sprintf("unknown action kind %q", a.Kind)}
		}
		pos[a] = i
	}
	want := len(p.in(s))*2 + len(p.out(s))*2 + 2
	if sch.Split {
		want++
	}
	if len(sch.Lists[s]) != want*p.MicroBatches {
		return &CheckError{s, fmt.Sprintf("has %d actions, want %d per micro-batch", len(sch.Lists[s]), want)}
	}
	for mb := 0; mb < p.MicroBatches; mb++ {
		if err := checkOrder(sch, s, mb, pos); err != nil {
			return err
		}
	}
	return nil
}

// checkOrder checks, for one micro-batch, recv < F < send and recv < B < send < W.
func checkOrder(sch *Schedule, s, mb int, pos map[Action]int) error {
	p := sch.Pipe
	f, okF := pos[Action{Kind: Forward, MB: mb}]
	b, okB := pos[Action{Kind: Backward, MB: mb}]
	if !okF || !okB || b < f {
		return &CheckError{s, fmt.Sprintf("micro-batch %d needs F before B", mb)}
	}
	if w, ok := pos[Action{Kind: Weight, MB: mb}]; sch.Split && (!ok || w < b) {
		return &CheckError{s, fmt.Sprintf("micro-batch %d needs W after B", mb)}
	}
	before := func(a Action, at int, after bool) error {
		i, ok := pos[a]
		if !ok || (i < at) == after {
			return &CheckError{s, fmt.Sprintf("micro-batch %d: %v missing or on the wrong side of its compute", mb, a)}
		}
		return nil
	}
	for _, e := range p.in(s) {
		if err := before(Action{Kind: Recv, MB: mb, Edge: e, Dir: Act}, f, false); err != nil {
			return err
		}
		if err := before(Action{Kind: Send, MB: mb, Edge: e, Dir: Grad}, b, true); err != nil {
			return err
		}
	}
	for _, e := range p.out(s) {
		if err := before(Action{Kind: Send, MB: mb, Edge: e, Dir: Act}, f, true); err != nil {
			return err
		}
		if err := before(Action{Kind: Recv, MB: mb, Edge: e, Dir: Grad}, b, false); err != nil {
			return err
		}
	}
	return nil
}
