package stage

import (
	"fmt"
	"math"
	"strings"
)

// OptimizerSpec is one optimizer of the catalogue: its name, PyTorch's
// class, the defaults graphpipe's commands use, and the state it keeps.
type OptimizerSpec struct {
	Name  string
	Torch string // the PyTorch class it follows step for step
	// LR and WeightDecay are the defaults when the flags are not given:
	// LR graphpipe's (PyTorch has none for SGD), WeightDecay PyTorch's.
	LR, WeightDecay float64
	// Momentum says whether --momentum (and --nesterov) apply.
	Momentum bool
	new      func(o TrainOptions) Optimizer
	// stateBytes is the optimizer state per parameter element.
	stateBytes func(o TrainOptions) int64
}

// Optimizers is the catalogue, in the order help lists it: every command,
// the planner's memory model and the checkpoints take optimizers from it.
var Optimizers = []OptimizerSpec{
	{Name: "sgd", Torch: "torch.optim.SGD", LR: 0.05, Momentum: true,
		new: func(o TrainOptions) Optimizer {
			return &SGD{Momentum: o.Momentum, WeightDecay: o.WeightDecay, Nesterov: o.Nesterov, MatricesOnly: o.NoDecayBiasNorm, buf: map[string][]float32{}}
		},
		stateBytes: func(o TrainOptions) int64 { // momentum_buffer
			if o.Momentum == 0 {
				return 0
			}
			return 4
		}},
	{Name: "adam", Torch: "torch.optim.Adam", LR: 1e-3, new: newAdam(false), stateBytes: adamBytes},
	{Name: "adamw", Torch: "torch.optim.AdamW", LR: 1e-3, WeightDecay: 1e-2, new: newAdam(true), stateBytes: adamBytes},
}

// newAdam makes Adam or AdamW with PyTorch's betas (0.9, 0.999) and eps 1e-8.
func newAdam(decoupled bool) func(o TrainOptions) Optimizer {
	return func(o TrainOptions) Optimizer {
		return &Adam{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: o.WeightDecay, Decoupled: decoupled, MatricesOnly: o.NoDecayBiasNorm,
			m: map[string][]float32{}, v: map[string][]float32{}}
	}
}

func adamBytes(TrainOptions) int64 { return 8 }

// exp_avg and exp_avg_sq

// OptimizerNames lists the catalogue's names: "sgd, adam, adamw".
func OptimizerNames() string {
	names := make([]string, len(Optimizers))
	for i, s := range Optimizers {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

// LookupOptimizer finds an optimizer of the catalogue by name.
func LookupOptimizer(name string) (OptimizerSpec, error) {
	for _, s := range Optimizers {
		if s.Name == name {
			return s, nil
		}
	}
	return OptimizerSpec{}, &OptionError{"optimizer", fmt.Sprintf("unknown optimizer %q (known: %s)", name, OptimizerNames())}
}

// StateBytes is the optimizer state o keeps per parameter element: what
// planning and the host-memory checks count beside weights and gradients.
func StateBytes(o TrainOptions) (int64, error) {
	s, err := LookupOptimizer(o.Optimizer)
	if err != nil {
		return 0, err
	}
	return s.stateBytes(o), nil
}

// OptionError is a training option graphpipe cannot use; Flag names the
// command-line flag it comes from.
type OptionError struct {
	Flag, Msg string
}

func (e *OptionError) Error() string { return fmt.Sprintf("--%s: %s", e.Flag, e.Msg) }

// NewOptimizer makes o's optimizer after checking o (Check).
func NewOptimizer(o TrainOptions) (Optimizer, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	s, _ := LookupOptimizer(o.Optimizer)
	return s.new(o), nil
}

// Check refuses options no optimizer, schedule or clipping can use, naming
// the flag at fault.
func (o TrainOptions) Check() error {
	s, err := LookupOptimizer(o.Optimizer)
	if err != nil {
		return err
	}
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	switch {
	case !(o.LR > 0) || !finite(o.LR):
		return &OptionError{"lr", fmt.Sprintf("must be a positive number, got %g", o.LR)}
	case !(o.WeightDecay >= 0) || !finite(o.WeightDecay):
		return &OptionError{"weight-decay", fmt.Sprintf("must be a number of at least 0, got %g", o.WeightDecay)}
	case (o.Momentum != 0 || o.Nesterov) && !s.Momentum:
		return &OptionError{"momentum", fmt.Sprintf("%s has no momentum (sgd has)", s.Name)}
	case !(o.Momentum >= 0 && o.Momentum < 1):
		return &OptionError{"momentum", fmt.Sprintf("must be in [0, 1), got %g", o.Momentum)}
	case o.Nesterov && o.Momentum == 0:
		return &OptionError{"nesterov", "needs a --momentum above 0"}
	case o.ClipGradNorm < 0 || !finite(o.ClipGradNorm):
		return &OptionError{"clip-grad-norm", fmt.Sprintf("must be a positive number (0: no clipping), got %g", o.ClipGradNorm)}
	}
	return o.schedule().check()
}
