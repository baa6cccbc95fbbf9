package stage

// Verdict is what a training run does with a step, once its values have
// been checked for NaNs and infinities (StepReport.NonFinite).
type Verdict uint8

const (
	// StepOn: the step's values are finite; its update is applied.
	StepOn Verdict = iota
	// SkipStep: a value is not finite and the run skips the step's update
	// (on every stage and replica alike, as mixed-precision loss scaling
	// does).
	SkipStep
	// StopRun: a value is not finite and the run ends there.
	StopRun
)

// NonFinite is the one rule graphpipe train and a pipeline's coordinator
// follow at a step whose loss or gradients are not finite: stop, or skip
// its update up to MaxSkips steps in a row. It counts the steps skipped in
// a row; a step that is finite starts the count again.
type NonFinite struct {
	Skip     bool // skip such a step's update; false: stop at it
	MaxSkips int  // with Skip: the most steps skipped in a row (at least 1)
	skips    int  // steps skipped in a row so far
}

// Judge gives the verdict on a step whose check found bad ("" for none)
// and, for StopRun after skips, how many steps in a row had been skipped.
func (n *NonFinite) Judge(bad string) (v Verdict, skipped int) {
	switch {
	case bad == "":
		n.skips = 0
		return StepOn, 0
	case !n.Skip:
		return StopRun, 0
	case n.skips >= n.MaxSkips:
		return StopRun, n.skips
	}
	n.skips++
	return SkipStep, 0
}

// Skips is the steps skipped in a row so far.
func (n *NonFinite) Skips() int { return n.skips }
