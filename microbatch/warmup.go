package microbatch

import (
	"math"
)

// Warmup is how many forwards each stage of a 1F1B schedule runs before its
// first backward, given the durations t and a per-device memory limit in
// bytes (0: none).
//
// With its depth (1 + its longest path to a sink) in flight a stage is
// exactly as far ahead as its successors need when transfers are free; a
// transfer then stalls the whole pipeline once per micro-batch. In a steady state of period P (the slowest
// stage's F + B) let x_s be how long after the start of its forward of
// micro-batch j stage s starts its backward of j. Stage s's list forces
// (w_s − 1)·P + F_s ≤ x_s ≤ w_s·P − B_s, w_s being its warm-up count: the
// backward of j − w_s + 1 follows the forward of j, and the forward of j
// follows the backward of j − w_s. The data force x_s ≥ F_s + max over
// edges s→u of (x_u + B_u + the two transfers of the edge). Taking each x_s
// as small as its constraints allow, from the sinks up, gives the least w_s
// with no stall:
//
//	y_s = F_s + max over edges s→u of (x_u + B_u + Act + Grad)   (F_s at a sink)
//	w_s = ceil((y_s + B_s) / P)
//	x_s = max((w_s − 1)·P + F_s, y_s)
//
// With free transfers and equal stages this is 1 + the depth; with a transfer
// of c on every edge of a chain of stages as slow as P, w grows by 2 per stage
// (each stage's window is a single point). A stage never warms up fewer than
// its depth, more than the number of micro-batches, or more than its memory
// holds, (limit − Static) / Stash (t.Limit's, where set); and never more than a stage before it (the
// schedule would deadlock), so a stage held back by memory holds back those
// after it. Where memory holds w back, the simulator shows the stall.
func Warmup(p Pipeline, t Timing, limit int64) ([]int, error) {
	if err := t.check(&Schedule{Pipe: p, Lists: make([][]Action, p.Stages)}); err != nil {
		return nil, err
	}
	order, err := p.order()
	if err != nil {
		return nil, err
	}
	depth, _ := p.Depth()
	back := func(s int) float64 { return t.B[s] + at(t.W, s) }
	period := 0.0
	for s := 0; s < p.Stages; s++ {
		period = max(period, t.F[s]+back(s))
	}
	x := make([]float64, p.Stages)
	warm := make([]int, p.Stages)
	for k := len(order) - 1; k >= 0; k-- {
		s := order[k]
		tail := 0.0
		for _, e := range p.out(s) {
			u := p.Edges[e][1]
			tail = max(tail, x[u]+back(u)+t.Act[e]+t.Grad[e])
		}
		y := t.F[s] + tail
		warm[s] = depth[s]
		if period > 0 {
			// a hair over an integer is that integer: float sums of equal stages
			warm[s] = max(warm[s], int(math.Ceil((y+back(s))/period-1e-9)))
		}
		for _, e := range p.out(s) { // ahead of every successor
			warm[s] = max(warm[s], warm[p.Edges[e][1]]+1)
		}
		warm[s] = min(warm[s], max(p.MicroBatches, depth[s]), memoryCap(t, s, limit, depth[s]))
		x[s] = max(float64(warm[s]-1)*period+t.F[s], y)
	}
	for _, s := range order { // behind every stage before it
		for _, e := range p.in(s) {
			warm[s] = min(warm[s], warm[p.Edges[e][0]]-1)
		}
	}
	return warm, nil
}

// memoryCap is the most micro-batches stage s may hold, but at least its
// depth: the planner's own memory rule already made room for that many.
func memoryCap(t Timing, s int, limit int64, depth int) int {
	if s < len(t.Limit) {
		limit = t.Limit[s]
	}
	stash := atInt(t.Stash, s)
	if limit <= 0 || stash <= 0 {
		return math.MaxInt
	}
	room := (limit - atInt(t.Static, s)) / stash
	return max(depth, int(min(room, math.MaxInt32)))
}
