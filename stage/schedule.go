package stage

import (
	"fmt"
	"math"
	"strings"
)

// Schedules are the learning-rate schedules, in the order help lists them.
// Each is PyTorch's torch.optim.lr_scheduler.LambdaLR over the optimizer
// with the factor of Schedule.Factor, stepped once after every optimizer
// step: the step k (from 0) runs at lr·factor(k). These are the factors of
// Hugging Face transformers' get_constant_schedule_with_warmup,
// get_linear_schedule_with_warmup and get_cosine_schedule_with_warmup
// (num_cycles 0.5), the recipes most training scripts use.
var Schedules = []string{"constant", "linear", "cosine"}

// Schedule is a learning-rate schedule over a run of Steps steps.
type Schedule struct {
	Kind   string // one of Schedules; "" is constant
	Warmup int    // the rate rises linearly from 0 over the first Warmup steps
	Steps  int    // the run's length: linear and cosine reach 0 at it
}

// Factor is the schedule's multiplier of the base rate at step k (from 0),
// computed in float64 as Python does:
//
//	k < Warmup:  k / max(1, Warmup)
//	constant:    1
//	linear:      max(0, (Steps − k) / max(1, Steps − Warmup))
//	cosine:      max(0, ½(1 + cos(π·p))), p = (k − Warmup) / max(1, Steps − Warmup)
func (s Schedule) Factor(k int) float64 {
	if k < s.Warmup {
		return float64(k) / float64(max(1, s.Warmup))
	}
	span := float64(max(1, s.Steps-s.Warmup))
	switch s.Kind {
	case "linear":
		return max(0, float64(s.Steps-k)/span)
	case "cosine":
		p := float64(k-s.Warmup) / span
		return max(0, 0.5*(1+math.Cos(math.Pi*p)))
	}
	return 1
}

func (s Schedule) check() error {
	known := false
	for _, k := range Schedules {
		known = known || s.Kind == k
	}
	switch {
	case s.Kind != "" && !known:
		return &OptionError{"lr-schedule", fmt.Sprintf("unknown schedule %q (known: %s)", s.Kind, strings.Join(Schedules, ", "))}
	case s.Warmup < 0:
		return &OptionError{"warmup-steps", fmt.Sprintf("must be at least 0, got %d", s.Warmup)}
	case (s.Kind == "linear" || s.Kind == "cosine") && s.Steps < 1:
		return &OptionError{"steps", fmt.Sprintf("the %s schedule decays over the run's steps: must be positive, got %d", s.Kind, s.Steps)}
	}
	return nil
}

// schedule is o's learning-rate schedule.
func (o TrainOptions) schedule() Schedule {
	return Schedule{Kind: o.Schedule, Warmup: o.WarmupSteps, Steps: o.Steps}
}

// Rate is the learning rate of step k (from 0): the base rate LR times the
// schedule's factor, a function of the step alone, so a resumed or
// restarted run steps at the rates of one that never stopped.
func (o TrainOptions) Rate(k int) float64 {
	return o.LR * o.schedule().Factor(k)
}
