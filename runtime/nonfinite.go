package runtime

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
)

// What a run does at a step whose loss or gradients are not finite
// (Options.OnNonFinite).
const (
	// NonFiniteStop ends the run there (NonFiniteError), writing no
	// checkpoint from that step and spending no restart: the computation is
	// deterministic and would diverge again.
	NonFiniteStop = "stop"
	// NonFiniteSkip skips that step's optimizer update on every stage and
	// replica alike, as mixed-precision loss scaling does, and stops after
	// Config.MaxSkips such steps in a row.
	NonFiniteSkip = "skip"
)

// Float is a float64 that JSON carries whole: NaN and the infinities as
// the strings "NaN", "+Inf" and "-Inf", which encoding/json refuses as
// numbers.
type Float float64

func (f Float) MarshalJSON() ([]byte, error) {
	if v := float64(f); math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte(`"` + strconv.FormatFloat(v, 'g', -1, 64) + `"`), nil
	}
	return json.Marshal(float64(f))
}

func (f *Float) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("not a number: %q", s)
		}
		*f = Float(v)
		return nil
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*f = Float(v)
	return nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// NonFiniteError ends a run at a step whose loss, gradients or parameters
// held a NaN or an infinity.
type NonFiniteError struct {
	Step  int    // the step, counted from 1 as the progress line counts
	Stage int    // the first stage that found one; -1: a single process
	What  string // where: the first op with such a value and which value
	// Skips > 0: the run had skipped this many steps in a row, its limit.
	Skips int
	// Saved is the step of the newest checkpoint this run wrote, all of
	// whose values are finite, in Dir; 0 with Dir "" for none.
	Saved int
	Dir   string
	// Resumed is the step of the checkpoint the run resumed from, if any.
	Resumed int
}

func (e *NonFiniteError) Error() string {
	where := e.What
	if e.Stage >= 0 {
		where = fmt.Sprintf("stage %d, %s", e.Stage, e.What)
	}
	msg := fmt.Sprintf("step %d: non-finite values: %s", e.Step, where)
	if e.Skips > 0 {
		msg = fmt.Sprintf("step %d: non-finite values again after %d steps in a row skipped (the --max-skips limit): %s", e.Step, e.Skips, where)
	}
	switch {
	case e.Stage < 0: // one process (graphpipe train): no checkpoints
	case e.Dir != "":
		msg += fmt.Sprintf("; the last finite parameters are checkpoint %s in %s", filepath.Base(stepDir("", e.Saved)), e.Dir)
	case e.Resumed > 0:
		msg += fmt.Sprintf("; no checkpoint was written since the one it resumed from (step %d)", e.Resumed)
	default:
		msg += "; no checkpoint was written"
	}
	return msg
}

// describe says what a stage found not finite in an iteration, "" if
// nothing: the executor's check as the step ended (stage.StepReport: the
// loss it holds, then its gradients, read once, and, only when something
// is, the first op with such a value).
func (w *Worker) describe() string {
	if w.Emulate {
		return ""
	}
	return w.lastStep.NonFinite
}
