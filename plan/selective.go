package plan

import (
	"fmt"
	"math"
)

// Selective backprop in a plan (stage/selective.go has the rule): a plan
// priced for it records the fraction of samples expected to have a
// backward pass (BackpropFraction), and every stage's backward time and
// every edge's gradient transfer (PlanEdge.GradTransfer) is priced at the
// kept rows alone; the activations' transfers and the forward passes are
// whole. run refuses a plan priced for it without --selective-backprop, and
// the reverse.

// GradTransferS is the edge's gradients' transfer per micro-batch: its
// GradTransfer where the plan priced selective backprop, else Transfer
// (the activations' and the gradients' the same bytes).
func (e PlanEdge) GradTransferS() float64 {
	if e.GradTransfer > 0 {
		return e.GradTransfer
	}
	return e.Transfer
}

// checkSelective refuses a backprop fraction outside (0, 1] (0: none) and
// a gradient transfer that is negative.
func (p *Plan) checkSelective() error {
	if f := p.BackpropFraction; f < 0 || f > 1 || math.IsNaN(f) {
		return planErr(-1, "backprop_fraction", "must be in (0, 1] (or absent), got %v", f)
	}
	for i, e := range p.Edges {
		if err := nonNegative(-1, fmt.Sprintf("edges[%d].grad_transfer_s", i), e.GradTransfer); err != nil {
			return err
		}
	}
	return nil
}
