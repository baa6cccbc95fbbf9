package stage

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/stage/internal/kernel"
)

// Selective-Backprop (Jiang et al., 2019, "Accelerating Deep Learning by
// Focusing on the Biggest Losers"): the forward pass scores every sample
// of a batch by its loss, and only some samples get a backward pass. A
// sample is kept with probability percentile(loss)^β, its percentile taken
// among the losses of the last Window samples seen, so a sample as hard as
// the hardest is always kept and easy ones mostly skip their backward.
// Under a percentile that is uniform, a sample is kept with probability
// 1/(β+1) (Fraction).
//
// How graphpipe runs it, the same in one process (Trainer) and in a
// pipeline (the runtime's workers):
//
//  1. The stage holding the loss computes each sample's loss in every
//     training Forward (Executor.SampleLosses) and decides, micro-batch by
//     micro-batch, which samples are kept (Selector.Keep): a function of
//     the history at the step's start, the seed, the step and the sample's
//     index in the batch alone, never of the plan or of the order the
//     micro-batches run in.
//  2. A micro-batch's backward passes run on its kept rows alone, compacted
//     (Executor.Compact: values and stashes cut to the rows; an op whose
//     stash is not made of rows runs its forward again on them), and what
//     crosses a stage edge backward is the kept rows' gradients, with the
//     list of kept rows.
//  3. The step's gradient is the mean over the batch's kept samples of
//     their loss's gradient: each kept sample weighs 1/B in its backward,
//     as in a full step, and EndStep scales the sum by B/K, K the batch's
//     kept samples (Executor.Selected). With every sample kept (warm-up, or
//     by chance) the step is a full step bit for bit. The step's reported
//     loss stays the mean over the whole batch, from the forward pass.
//  4. After the step the batch's losses join the history, in sample order
//     (Selector.Record). The history is part of a checkpoint
//     (Selector.History, SetHistory), so a resumed run decides as the
//     uninterrupted one.
//
// A model whose ops mix the samples of a batch (batch_norm) has no
// per-sample loss to select on (a sample's loss depends on its batch), so
// CheckSelective refuses it, as it refuses a loss without per-sample
// losses.

// Selective is selective backprop's settings: what TrainOptions.Selective
// carries to every worker.
type Selective struct {
	// Beta is the selectivity: a sample is kept with probability
	// percentile^Beta; > 0.
	Beta float64 `json:"beta"`
	// Window is how many of the last samples' losses the percentile is
	// taken among; > 0.
	Window int `json:"window"`
	// WarmupSteps are the first steps, every sample kept (their losses
	// still fill the history).
	WarmupSteps int `json:"warmup_steps,omitempty"`
}

// DefaultSBWindow is Selective.Window's default.
const DefaultSBWindow = 1024

// SelectiveError is a setting of Selective that cannot be used; Field
// names it ("beta", "window", "warmup_steps").
type SelectiveError struct {
	Field string
	Msg   string
}

func (e *SelectiveError) Error() string { return "selective backprop: " + e.Field + ": " + e.Msg }

// Check refuses settings selective backprop cannot run with.
func (s Selective) Check() error {
	switch {
	case !(s.Beta > 0) || math.IsInf(s.Beta, 0):
		return &SelectiveError{"beta", fmt.Sprintf("must be positive and finite, got %v", s.Beta)}
	case s.Window < 1:
		return &SelectiveError{"window", fmt.Sprintf("must be at least 1, got %d", s.Window)}
	case s.WarmupSteps < 0:
		return &SelectiveError{"warmup_steps", fmt.Sprintf("must be at least 0, got %d", s.WarmupSteps)}
	}
	return nil
}

// Fraction is the expected fraction of samples kept under the percentile
// rule, 1/(β+1): what the planner prices when no measured one is given.
func (s Selective) Fraction() float64 { return 1 / (s.Beta + 1) }

// UnselectableError is a model selective backprop cannot run on: Op names
// the op at fault.
type UnselectableError struct {
	Op, Why string
}

func (e *UnselectableError) Error() string {
	return fmt.Sprintf("op %q: %s, so the model has no per-sample losses to select samples by", e.Op, e.Why)
}

// CheckSelective refuses a model selective backprop cannot run on: a loss
// without per-sample losses (kernel.SampleLosses), or an op that mixes
// the samples of a batch (batch_norm: a sample's loss depends on the
// others, and a backward on some rows is not theirs).
func CheckSelective(g *dag.Graph) error {
	l := g.Loss()
	if kernel.SampleLosses(g.Op(l).Kind) == nil {
		return &UnselectableError{g.Op(l).Name, fmt.Sprintf("its loss kind %s gives no per-sample losses", g.Op(l).Kind)}
	}
	for i := 0; i < g.NumOps(); i++ {
		if g.Op(i).Kind.MixesSamples() {
			return &UnselectableError{g.Op(i).Name, fmt.Sprintf("%s computes each sample from the others of its batch", g.Op(i).Kind)}
		}
	}
	return nil
}

// Selector decides which samples of a step are kept: the history of
// recent losses and the rule. The loss's stage owns it (in one process,
// the Trainer). Keep reads the history as it stood when the step began;
// Record adds a step's losses after it.
type Selector struct {
	cfg    Selective
	seed   int64
	hist   []float64 // the last cfg.Window finite losses, oldest first
	sorted []float64 // hist sorted: the percentiles' table for the step at hand
}

// NewSelector is a selector of settings cfg (checked) drawing from seed,
// with an empty history.
func NewSelector(cfg Selective, seed int64) (*Selector, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	return &Selector{cfg: cfg, seed: seed}, nil
}

// Settings is the selector's Selective.
func (s *Selector) Settings() Selective { return s.cfg }

// Keep says whether sample (its index in the step's batch) of step, whose
// loss is loss, has a backward pass: always during warm-up, with no
// history yet, or for a loss that is not finite; else with probability
// percentile^β, the draw a function of (seed, step, sample) alone.
func (s *Selector) Keep(step, sample int, loss float64) bool {
	if step < s.cfg.WarmupSteps || len(s.sorted) == 0 || math.IsNaN(loss) || math.IsInf(loss, 0) {
		return true
	}
	return drawUniform(s.seed, step, sample) < math.Pow(s.Percentile(loss), s.cfg.Beta)
}

// Percentile is the fraction of the history at or below loss (the
// empirical CDF): 1 for a loss as large as any.
func (s *Selector) Percentile(loss float64) float64 {
	if len(s.sorted) == 0 {
		return 1
	}
	at := sort.Search(len(s.sorted), func(i int) bool { return s.sorted[i] > loss })
	return float64(at) / float64(len(s.sorted))
}

// KeepRows is Keep for the rows of a micro-batch whose first row is sample
// first of step: the indices of its rows kept, ascending.
func (s *Selector) KeepRows(step, first int, losses []float64) []int {
	kept := make([]int, 0, len(losses))
	for r, l := range losses {
		if s.Keep(step, first+r, l) {
			kept = append(kept, r)
		}
	}
	return kept
}

// Record adds a step's losses, in sample order, to the history: its
// finite ones, the oldest dropped past the window.
func (s *Selector) Record(losses []float64) {
	for _, l := range losses {
		if !math.IsNaN(l) && !math.IsInf(l, 0) {
			s.hist = append(s.hist, l)
		}
	}
	if over := len(s.hist) - s.cfg.Window; over > 0 {
		s.hist = append(s.hist[:0], s.hist[over:]...)
	}
	s.sorted = append(s.sorted[:0], s.hist...)
	slices.Sort(s.sorted)
}

// History is the losses the selector remembers, oldest first: what a
// checkpoint keeps.
func (s *Selector) History() []float64 { return slices.Clone(s.hist) }

// SetHistory restores what History returned.
func (s *Selector) SetHistory(h []float64) error {
	for _, l := range h {
		if math.IsNaN(l) || math.IsInf(l, 0) {
			return fmt.Errorf("selective backprop: a history of losses holds %v", l)
		}
	}
	if len(h) > s.cfg.Window {
		return fmt.Errorf("selective backprop: a history of %d losses, past the window of %d", len(h), s.cfg.Window)
	}
	s.hist = nil
	s.Record(h)
	return nil
}

// drawUniform is a number in [0, 1) from (seed, step, sample) alone:
// SplitMix64's finaliser folding in one after another, 53 bits of it.
func drawUniform(seed int64, step, sample int) float64 {
	h := mix64(uint64(seed))
	h = mix64(h ^ uint64(step))
	h = mix64(h ^ uint64(sample))
	return float64(h>>11) / (1 << 53)
}

// mix64 is SplitMix64's step: the golden-ratio increment, then its finaliser.
func mix64(h uint64) uint64 {
	h += 0x9e3779b97f4a7c15
	h = (h ^ h>>30) * 0xbf58476d1ce4e5b9
	h = (h ^ h>>27) * 0x94d049bb133111eb
	return h ^ h>>31
}
