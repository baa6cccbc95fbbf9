package search

import "fmt"

// Selective backprop in the cost model (stage/selective.go has the rule,
// plan/selective.go the plan's fields): with Options.BackpropFraction k
// set, a micro-batch's backward passes run on about k of its rows, so every
// op's input- and weight-gradient time is priced at k of the micro-batch's
// (times), and an edge's gradients at k of its bytes (gradTransfer); the
// forward passes, the activations and the memory they stash are whole. The
// loss's stage keeps one history of the batch's losses, so it never runs
// on data-parallel replicas (its block is whole, as a batch_norm's is).

// checkBackpropFraction refuses a fraction outside (0, 1] (0: none).
func (o *Options) checkBackpropFraction() error {
	if f := o.BackpropFraction; f < 0 || f > 1 || f != f {
		return &OptionError{"backprop-fraction", fmt.Sprintf("must be in (0, 1], got %v", f)}
	}
	return nil
}

// selective prices the cost model's ops for selective backprop's kept
// fraction k (0: none) and keeps the loss's stage whole.
func (cm *costModel) selective(k float64) {
	if k <= 0 || k >= 1 {
		return
	}
	cm.kept = k
	cm.mixes[cm.g.Loss()] = true
}

// keptTimes is an op's time with its backward passes on the kept rows
// alone.
func (cm *costModel) keptTimes(t opTime) opTime {
	if cm.kept == 0 {
		return t
	}
	return opTime{f: t.f, bi: cm.kept * t.bi, bw: cm.kept * t.bw}
}

// gradTransfer is an edge's gradients' transfer of a micro-batch whose
// activations are bytes, transfer pricing bytes: 0 (the same as the
// activations') without selective backprop.
func (cm *costModel) gradTransfer(transfer func(bytes float64) float64, bytes float64) float64 {
	if cm.kept == 0 || bytes <= 0 {
		return 0
	}
	return transfer(cm.kept * bytes)
}
