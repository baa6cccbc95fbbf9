package main

import (
	"errors"
	"fmt"
	"math"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/stage"
)

// sbFlags are selective backprop's flags (stage/selective.go), shared by
// train and run: what makes TrainOptions.Selective.
type sbFlags struct {
	beta          float64
	window        int
	warmupEpochs  int
	backpropShare float64 // search and run: a measured kept fraction to price (--backprop-fraction)
}

func (f *sbFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.Float64Var(&f.beta, "selective-backprop", 0, "Selective-Backprop: a backward pass only for the samples kept, each with probability percentile(loss)^`BETA` among the last --sb-window losses (about 1/(BETA+1) of them); the step's gradient is the mean over the kept samples (0: every sample, the default)")
	fl.IntVar(&f.window, "sb-window", stage.DefaultSBWindow, "with --selective-backprop: the last `N` samples' losses the percentile is taken among")
	fl.IntVar(&f.warmupEpochs, "sb-warmup-epochs", 0, "with --selective-backprop and --data: train the first `K` epochs on every sample")
}

// registerPlanning adds what a search prices selective backprop with:
// search and run.
func (f *sbFlags) registerPlanning(cmd *cobra.Command) {
	cmd.Flags().Float64Var(&f.backpropShare, "backprop-fraction", 0, "with --selective-backprop: price the backward passes and gradient messages at this measured `FRACTION` of the samples (train --json's backprop_samples over its samples) instead of 1/(BETA+1)")
}

// on says whether the flags ask for selective backprop.
func (f *sbFlags) on(cmd *cobra.Command) bool { return cmd.Flags().Changed("selective-backprop") }

// check refuses settings that cannot run, naming the flag (exit 2), before
// anything is read.
func (f *sbFlags) check(cmd *cobra.Command, backend string) error {
	fl := cmd.Flags()
	if !f.on(cmd) {
		for _, name := range []string{"sb-window", "sb-warmup-epochs", "backprop-fraction"} {
			if fl.Lookup(name) != nil && fl.Changed(name) {
				return usagef("--%s: needs --selective-backprop", name)
			}
		}
		return nil
	}
	s := stage.Selective{Beta: f.beta, Window: f.window}
	if err := s.Check(); err != nil {
		return f.settingError(err)
	}
	switch {
	case f.warmupEpochs < 0:
		return usagef("--sb-warmup-epochs: must be at least 0, got %d", f.warmupEpochs)
	case fl.Lookup("backprop-fraction") != nil && fl.Changed("backprop-fraction") && !(f.backpropShare > 0 && f.backpropShare <= 1):
		return usagef("--backprop-fraction: must be in (0, 1], got %v", f.backpropShare)
	case backend != "" && backend != "cpu":
		return usagef("--selective-backprop: runs on the cpu backend only, not --backend %s", backend)
	}
	return nil
}

// settingError is a refused stage.Selective as the flag that set it.
func (f *sbFlags) settingError(err error) error {
	var se *stage.SelectiveError
	if !errors.As(err, &se) {
		return err
	}
	flag := map[string]string{"beta": "--selective-backprop", "window": "--sb-window", "warmup_steps": "--sb-warmup-epochs"}[se.Field]
	return usagef("%s: %s", flag, se.Msg)
}

// settings is the Selective the flags make for g (nil without
// --selective-backprop), the warm-up in steps of the data's epochs
// (stepsPerEpoch 0: no --data, and no warm-up may be asked). A model
// without per-sample losses is refused, naming the op.
func (f *sbFlags) settings(cmd *cobra.Command, g *dag.Graph, stepsPerEpoch int) (*stage.Selective, error) {
	if !f.on(cmd) {
		return nil, nil
	}
	if err := stage.CheckSelective(g); err != nil {
		return nil, usagef("--selective-backprop: %v", err)
	}
	if f.warmupEpochs > 0 && stepsPerEpoch == 0 {
		return nil, usagef("--sb-warmup-epochs: needs --data (the model's synthetic data has no epochs)")
	}
	warmup := f.warmupEpochs * stepsPerEpoch
	if stepsPerEpoch > 0 && f.warmupEpochs > math.MaxInt/stepsPerEpoch {
		warmup = math.MaxInt // longer than any run: every step keeps every sample (the product overflows)
	}
	s := &stage.Selective{Beta: f.beta, Window: f.window, WarmupSteps: warmup}
	if err := s.Check(); err != nil {
		return nil, f.settingError(err)
	}
	return s, nil
}

// fraction is the kept fraction a search prices: --backprop-fraction, or
// 1/(BETA+1); 0 without selective backprop.
func (f *sbFlags) fraction(cmd *cobra.Command) float64 {
	switch {
	case !f.on(cmd):
		return 0
	case f.backpropShare > 0:
		return f.backpropShare
	}
	return stage.Selective{Beta: f.beta}.Fraction()
}

// keptLine is the progress lines' word on the samples with a backward
// pass: "" without selective backprop.
func keptLine(backprop, samples int) string {
	if samples <= 0 || backprop < 0 {
		return ""
	}
	return fmt.Sprintf(", backprop %.0f%%", 100*float64(backprop)/float64(samples))
}

// registerSearch adds what search prices selective backprop with: the
// selectivity and a measured fraction.
func (f *sbFlags) registerSearch(cmd *cobra.Command) {
	f.window = stage.DefaultSBWindow
	cmd.Flags().Float64Var(&f.beta, "selective-backprop", 0, "price the plan for Selective-Backprop at `BETA` (run --selective-backprop): the backward passes and gradient messages of about 1/(BETA+1) of the samples, the loss's stage on one device")
	f.registerPlanning(cmd)
}

// backpropLine is how a plan's summary says it is priced for selective
// backprop: "" for one that is not.
func backpropLine(p *plan.Plan) string {
	if p.BackpropFraction <= 0 {
		return ""
	}
	return fmt.Sprintf("selective: priced for %.1f%% of the samples with a backward pass (run --selective-backprop); every stage's backward and every edge's gradients at that share, the loss's stage on one device",
		100*p.BackpropFraction)
}

// reconcile refuses a plan given (model set: PLAN --model MODEL) that was
// priced for another backward than the flags ask: selective backprop on a
// plan priced for every sample, or the reverse. Fractions may differ (one
// measured, one the rule's).
func (f *sbFlags) reconcile(cmd *cobra.Command, p *plan.Plan, model string) error {
	switch {
	case model == "":
		return nil // searched here, as the flags say
	case f.on(cmd) && p.BackpropFraction == 0:
		return usagef("--selective-backprop: the plan is priced for a backward pass of every sample; search again with --selective-backprop %g", f.beta)
	case !f.on(cmd) && p.BackpropFraction > 0:
		return usagef("--selective-backprop: the plan is priced for selective backprop (%.1f%% of the samples with a backward pass); give --selective-backprop BETA, or search again without it", 100*p.BackpropFraction)
	}
	return nil
}

// backpropSamples is what a run of ran steps of batch samples saw, and how
// many of them had a backward pass: each step's (selective backprop), or
// all of them (backprop nil).
func backpropSamples(batch int64, ran int, backprop []int) (samples, kept int64) {
	samples = batch * int64(ran)
	if backprop == nil {
		return samples, samples
	}
	for _, k := range backprop {
		kept += int64(k)
	}
	return samples, kept
}
