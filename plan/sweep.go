package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/graphpipe/graphpipe/microbatch"
)

// SweepFormat is the version tag of a sweep file.
const SweepFormat = "graphpipe/sweep@1"

// The bounds of a sweep file: enough for any model-selection workload,
// small enough that a scheduler's search over them stays quick.
const (
	MaxSweepJobs  = 1024
	MaxSweepSteps = 1 << 30
	maxJobName    = 64
)

// Sweep is a sweep file: many training jobs meant for one cluster, each a
// `graphpipe run` of its own model (graphpipe sweep plans and runs them).
type Sweep struct {
	Format string     `json:"format"`
	Jobs   []SweepJob `json:"jobs"`
}

// SweepJob is one job of a sweep: what `graphpipe run` takes for it. A
// zero field is run's default (the model's batch, the optimizer's rate).
type SweepJob struct {
	// Name names the job in the schedule and its outputs' directory
	// (DIR/NAME): letters, digits, '-', '_' and '.', not starting with '.'.
	Name string `json:"name"`
	// Model is the model file, relative to the sweep file's directory
	// unless absolute.
	Model string `json:"model"`
	Steps int    `json:"steps"`
	// Seed, when set, overrides the model's seed (parameters and data).
	Seed       *int64 `json:"seed,omitempty"`
	Batch      int64  `json:"batch,omitempty"`
	MicroBatch int64  `json:"micro_batch,omitempty"`
	Schedule   string `json:"schedule,omitempty"`
	Precision  string `json:"precision,omitempty"`
	// Data is a dataset path (run's --data), relative like Model.
	Data string `json:"data,omitempty"`
	// OpTimes is the model's op times (search's --op-times: graphpipe
	// profile --model), relative like Model, to price it by.
	OpTimes string `json:"op_times,omitempty"`

	Optimizer    string   `json:"optimizer,omitempty"`
	LR           float64  `json:"lr,omitempty"`
	Momentum     float64  `json:"momentum,omitempty"`
	Nesterov     bool     `json:"nesterov,omitempty"`
	WeightDecay  *float64 `json:"weight_decay,omitempty"`
	LRSchedule   string   `json:"lr_schedule,omitempty"`
	WarmupSteps  int      `json:"warmup_steps,omitempty"`
	ClipGradNorm float64  `json:"clip_grad_norm,omitempty"`

	// After names the jobs this one waits for: it starts once they end.
	After []string `json:"after,omitempty"`
}

// SweepError is one thing wrong with a sweep file: the job it is about
// ("" for the file as a whole), the field and what is wrong.
type SweepError struct {
	Job   string
	Index int // the job's place in the file, -1 for the file
	Field string
	Msg   string
}

func (e *SweepError) Error() string {
	switch {
	case e.Index < 0:
		return "sweep: " + e.Field + ": " + e.Msg
	case e.Job == "":
		return fmt.Sprintf("sweep: jobs[%d]: %s: %s", e.Index, e.Field, e.Msg)
	}
	return fmt.Sprintf("sweep: job %q: %s: %s", e.Job, e.Field, e.Msg)
}

func sweepErr(i int, job, field, format string, args ...any) error {
	return &SweepError{Job: job, Index: i, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// DecodeSweep reads a sweep file (graphpipe/sweep@1) strictly: unknown
// fields, trailing data, an empty file or another format are refused, and
// so is a job that is not whole: a name that is missing, repeated or no
// directory name, no model, steps outside 1..MaxSweepSteps, a negative or
// non-finite number, an unknown schedule or precision, an `after` naming
// no job, itself or a job twice, and `after` lists that form a cycle. Each
// refusal is a SweepError naming the job and the field. What only the
// optimizer's catalogue knows (its names, its rate schedules) is the
// caller's to check.
func DecodeSweep(data []byte) (*Sweep, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, sweepErr(-1, "", "format", "the file is empty: not a sweep file")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s Sweep
	if err := dec.Decode(&s); err != nil {
		return nil, sweepErr(-1, "", "format", "not a sweep file: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, sweepErr(-1, "", "format", "unexpected data after the closing brace")
	}
	if s.Format != SweepFormat {
		return nil, sweepErr(-1, "", "format", "is %q, want %q", s.Format, SweepFormat)
	}
	if len(s.Jobs) == 0 || len(s.Jobs) > MaxSweepJobs {
		return nil, sweepErr(-1, "", "jobs", "a sweep has 1 to %d jobs, got %d", MaxSweepJobs, len(s.Jobs))
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Validate checks every job, then the jobs' `after` lists together.
func (s *Sweep) Validate() error {
	seen := map[string]int{}
	for i := range s.Jobs {
		j := &s.Jobs[i]
		if err := j.validate(i); err != nil {
			return err
		}
		if k, dup := seen[j.Name]; dup {
			return sweepErr(i, j.Name, "name", "jobs[%d] has this name too: each job's is its own", k)
		}
		seen[j.Name] = i
	}
	for i, j := range s.Jobs {
		for _, a := range j.After {
			if _, ok := seen[a]; !ok {
				return sweepErr(i, j.Name, "after", "no job is named %q", a)
			}
		}
	}
	if cyc := s.cycle(); cyc != nil {
		return sweepErr(cyc[0], s.Jobs[cyc[0]].Name, "after", "the jobs wait for one another in a cycle: %s", s.cycleWords(cyc))
	}
	return nil
}

// validate checks one job's own fields.
func (j *SweepJob) validate(i int) error {
	if err := CheckJobName(j.Name); err != nil {
		return sweepErr(i, "", "name", "%v", err)
	}
	bad := func(field, format string, args ...any) error { return sweepErr(i, j.Name, field, format, args...) }
	nonNeg := func(field string, v float64) error {
		if !(v >= 0) || math.IsInf(v, 0) {
			return bad(field, "must be a finite number, not negative, got %g", v)
		}
		return nil
	}
	switch {
	case strings.TrimSpace(j.Model) == "":
		return bad("model", "required: the model file, relative to the sweep file")
	case j.Steps < 1 || j.Steps > MaxSweepSteps:
		return bad("steps", "must be between 1 and %d, got %d", MaxSweepSteps, j.Steps)
	case j.Batch < 0:
		return bad("batch", "must be positive (or absent: the model's), got %d", j.Batch)
	case j.MicroBatch < 0:
		return bad("micro_batch", "must be positive (or absent: the planner's choice), got %d", j.MicroBatch)
	case j.Batch > 0 && j.MicroBatch > 0 && j.Batch%j.MicroBatch != 0:
		return bad("micro_batch", "%d does not divide the batch of %d", j.MicroBatch, j.Batch)
	case j.WarmupSteps < 0:
		return bad("warmup_steps", "must not be negative, got %d", j.WarmupSteps)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"lr", j.LR}, {"momentum", j.Momentum}, {"clip_grad_norm", j.ClipGradNorm}} {
		if err := nonNeg(f.name, f.v); err != nil {
			return err
		}
	}
	if m := j.Momentum; m >= 1 || float32(m) >= 1 { // the trainer's float32, which rounds near 1 to 1 and past 3.4e38 to +Inf
		return bad("momentum", "must be in [0, 1), got %g", m)
	}
	if j.WeightDecay != nil {
		if err := nonNeg("weight_decay", *j.WeightDecay); err != nil {
			return err
		}
	}
	if j.Schedule != "" {
		if _, err := microbatch.KindOf(j.Schedule); err != nil {
			return bad("schedule", "%v", err)
		}
	}
	if err := CheckPrecision(j.Precision); err != nil {
		return bad("precision", "%v", err)
	}
	return j.validateAfter(i)
}

// validateAfter refuses an `after` list naming the job itself or a job twice.
func (j *SweepJob) validateAfter(i int) error {
	seen := map[string]bool{}
	for _, a := range j.After {
		switch {
		case a == j.Name:
			return sweepErr(i, j.Name, "after", "a job cannot wait for itself")
		case seen[a]:
			return sweepErr(i, j.Name, "after", "names %q twice", a)
		}
		seen[a] = true
	}
	return nil
}

// CheckJobName refuses a job name that is not a directory name of its own:
// empty, over 64 bytes, starting with '.', or holding anything but letters,
// digits, '-', '_' and '.'.
func CheckJobName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("required: the job's name")
	case len(name) > maxJobName:
		return fmt.Errorf("%q: at most %d bytes", name, maxJobName)
	case name[0] == '.':
		return fmt.Errorf("%q: must not start with '.' (it names the job's output directory)", name)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%q: a job's name holds letters, digits, '-', '_' and '.'", name)
		}
	}
	return nil
}

// Index is the position of the job named name, or -1.
func (s *Sweep) Index(name string) int {
	for i, j := range s.Jobs {
		if j.Name == name {
			return i
		}
	}
	return -1
}

// cycle is a cycle of `after` edges, as job indices (the first repeated
// at the end), or nil when there is none.
func (s *Sweep) cycle() []int {
	const (
		unseen = iota
		open
		done
	)
	state := make([]int, len(s.Jobs))
	var stack []int
	var visit func(i int) []int
	visit = func(i int) []int {
		state[i] = open
		stack = append(stack, i)
		for _, a := range s.Jobs[i].After {
			k := s.Index(a)
			switch state[k] {
			case open:
				for p, q := range stack {
					if q == k {
						return append(append([]int(nil), stack[p:]...), k)
					}
				}
			case unseen:
				if c := visit(k); c != nil {
					return c
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[i] = done
		return nil
	}
	for i := range s.Jobs {
		if state[i] == unseen {
			if c := visit(i); c != nil {
				return c
			}
		}
	}
	return nil
}

// cycleWords writes a cycle as "a waits for b waits for a".
func (s *Sweep) cycleWords(cyc []int) string {
	names := make([]string, len(cyc))
	for i, k := range cyc {
		names[i] = fmt.Sprintf("%q", s.Jobs[k].Name)
	}
	return strings.Join(names, " waits for ")
}
