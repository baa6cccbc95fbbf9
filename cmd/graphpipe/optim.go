package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/stage"
)

// optimFlags are the optimizer's, the schedule's and clipping's flags,
// shared by train and run; names and defaults come from stage's catalogue.
type optimFlags struct {
	name                string
	lr, decay           float64
	momentum            float32
	nesterov, noDecay1D bool
	schedule            string
	warmup              int
	clip                float64
}

func (f *optimFlags) register(cmd *cobra.Command) {
	var lrs, decays []string
	for _, s := range stage.Optimizers {
		lrs = append(lrs, fmt.Sprintf("%g for %s", s.LR, s.Name))
		if s.WeightDecay != 0 {
			decays = append(decays, fmt.Sprintf("%g for %s", s.WeightDecay, s.Name))
		}
	}
	var torch []string
	for _, s := range stage.Optimizers {
		torch = append(torch, s.Torch)
	}
	fl := cmd.Flags()
	fl.StringVar(&f.name, "optimizer", "adam", stage.OptimizerNames()+" ("+strings.Join(torch, ", ")+")")
	fl.Float64Var(&f.lr, "lr", 0, "base learning rate (default "+strings.Join(lrs, ", ")+")")
	fl.Float32Var(&f.momentum, "momentum", 0, "sgd momentum")
	fl.BoolVar(&f.nesterov, "nesterov", false, "sgd: Nesterov momentum (needs --momentum)")
	fl.Float64Var(&f.decay, "weight-decay", 0, "weight decay: L2 added to the gradient for sgd and adam, decoupled for adamw (default "+strings.Join(decays, ", ")+", else 0)")
	fl.BoolVar(&f.noDecay1D, "no-decay-bias-norm", false, "no weight decay on biases and normalisation weights: every parameter of fewer than 2 dimensions")
	fl.StringVar(&f.schedule, "lr-schedule", "constant", strings.Join(stage.Schedules, ", ")+
		": each step's rate, as PyTorch's LambdaLR with transformers' get_*_schedule_with_warmup; linear and cosine decay to 0 at the last step")
	fl.IntVar(&f.warmup, "warmup-steps", 0, "raise the rate linearly from 0 over the first `N` steps")
	fl.Float64Var(&f.clip, "clip-grad-norm", 0, "clip the gradients to this global norm over the whole model, as torch.nn.utils.clip_grad_norm_ (0: none)")
}

// options resolves the flags for a run of steps steps: the catalogue's
// defaults where a flag is not given, every value checked (exit 2).
func (f *optimFlags) options(cmd *cobra.Command, steps int) (stage.TrainOptions, error) {
	spec, err := stage.LookupOptimizer(f.name)
	if err != nil {
		return stage.TrainOptions{}, usagef("%v", err)
	}
	o := stage.TrainOptions{Optimizer: f.name, LR: f.lr, Momentum: f.momentum, Nesterov: f.nesterov, WeightDecay: f.decay,
		NoDecayBiasNorm: f.noDecay1D, Schedule: f.schedule, WarmupSteps: f.warmup, Steps: steps, ClipGradNorm: f.clip}
	if !cmd.Flags().Changed("lr") {
		o.LR = spec.LR
	}
	if !cmd.Flags().Changed("weight-decay") {
		o.WeightDecay = spec.WeightDecay
	}
	if err := o.Check(); err != nil {
		var oe *stage.OptionError
		if errors.As(err, &oe) {
			return o, usagef("%v", err)
		}
		return o, err
	}
	return o, nil
}

// stateBytes is the optimizer state per parameter element of o.
func stateBytes(o stage.TrainOptions) int64 {
	b, _ := stage.StateBytes(o) // options has checked the name
	return b
}
