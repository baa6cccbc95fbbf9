package stage

import (
	"fmt"
	"time"

	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// Loop is what Trainer.Run trains: the steps, the rule at a step whose
// values are not finite, the evaluations, and what the caller is told as
// it goes. It is the one-process training loop, the reference every
// pipeline run is checked against.
type Loop struct {
	Steps     int
	NonFinite NonFinite
	// Eval is evaluated after each step EvalDue names (steps counted from
	// 0 of Steps); nil, or EvalDue nil: never.
	Eval    EvalSource
	EvalDue func(step, steps int) bool
	// Stepped, when set, is told each step once its update is applied or
	// skipped; an error it returns ends the run.
	Stepped func(StepResult) error
	// Evaluated, when set, is told each evaluation.
	Evaluated func(step int, r EvalResult)
}

// StepResult is what one step of Run did.
type StepResult struct {
	Step  int     // counted from 0
	Loss  float64 // before the update
	Batch map[string]*Value[float32]
	// NonFinite is where a value was not finite, the step's update
	// skipped; "" for none. Skips counts the steps skipped in a row.
	NonFinite string
	Skips     int
	Seconds   float64 // the step's time, from its batch to its update
	// Backprop is the samples that had a backward pass: the batch's, but
	// with selective backprop.
	Backprop int
	// DeviceCalls is what the step asked of the device (nil on the CPU).
	DeviceCalls *cuda.Counts
}

// NonFiniteStop ends Run at a step whose values are not finite.
type NonFiniteStop struct {
	Step  int    // counted from 1
	What  string // where: StepReport.NonFinite
	Skips int    // > 0: the steps skipped in a row before it, the limit
}

func (e *NonFiniteStop) Error() string {
	return fmt.Sprintf("step %d: non-finite values: %s", e.Step, e.What)
}

// EvalError is an evaluation of Run that failed.
type EvalError struct {
	Step int // the step it followed, counted from 1
	Err  error
}

func (e *EvalError) Error() string { return fmt.Sprintf("evaluation after step %d: %v", e.Step, e.Err) }

func (e *EvalError) Unwrap() error { return e.Err }

// Run trains the loop's steps: each step's batch through Compute, the
// verdict of l.NonFinite on its check, Apply, then an evaluation where one
// is due.
func (t *Trainer) Run(l Loop) error {
	dev := t.Ex.Device()
	for step := 0; step < l.Steps; step++ {
		var at cuda.Counts
		if dev != nil {
			at = dev.Counts()
		}
		began := time.Now()
		loss, batch, err := t.Compute(step)
		if err != nil {
			return err
		}
		bad := t.report.NonFinite
		v, skipped := l.NonFinite.Judge(bad)
		if v == StopRun {
			return &NonFiniteStop{Step: step + 1, What: bad, Skips: skipped}
		}
		if err := t.Apply(v == SkipStep); err != nil {
			return err
		}
		r := StepResult{Step: step, Loss: loss, Batch: batch, NonFinite: bad, Skips: l.NonFinite.Skips(), Seconds: time.Since(began).Seconds(),
			Backprop: t.backprop}
		if dev != nil {
			c := dev.Counts().Sub(at)
			r.DeviceCalls = &c
		}
		if l.Stepped != nil {
			if err := l.Stepped(r); err != nil {
				return err
			}
		}
		if l.Eval != nil && l.EvalDue != nil && l.EvalDue(step, l.Steps) {
			e, err := t.Evaluate(step+1, l.Eval)
			if err != nil {
				return &EvalError{Step: step + 1, Err: err}
			}
			if l.Evaluated != nil {
				l.Evaluated(step, e)
			}
		}
	}
	return nil
}
