package stage

import (
	"context"
	"fmt"

	"github.com/graphpipe/graphpipe/dag"
)

// TrainOptions configure single-process training.
type TrainOptions struct {
	Optimizer string  // a name of the catalogue, Optimizers
	LR        float64 // the base learning rate
	Momentum  float32 // sgd only
	Nesterov  bool    // sgd with momentum only
	// WeightDecay is the optimizer's: L2 added to the gradient (sgd, adam)
	// or decoupled (adamw). The commands default it from the catalogue.
	WeightDecay float64
	// NoDecayBiasNorm exempts biases and normalisation weights, every
	// parameter of fewer than 2 dimensions, from weight decay.
	NoDecayBiasNorm bool
	// Schedule ("constant", "linear" or "cosine"; "" is constant),
	// WarmupSteps and Steps, the run's length, make the rate of each step
	// (Rate).
	Schedule    string
	WarmupSteps int
	Steps       int
	// ClipGradNorm > 0 clips the gradients by their global norm over the
	// whole model to at most it (clip.go).
	ClipGradNorm float64
	Batch        int // 0: the model's batch_size
	MicroBatch   int // 0: the whole batch at once; must divide Batch
	// Selective, when set, runs selective backprop (selective.go): the
	// backward passes of each step only for the samples it keeps.
	Selective *Selective `json:",omitempty"`
}

// Trainer trains a whole model in one process: the reference every pipeline
// run is checked against. Its executor runs the step as a pipeline's
// workers do (step.go), with no other worker to talk to.
type Trainer struct {
	G    *dag.Graph
	Ex   *Executor
	Data *Dataset // the model's synthetic data
	// Source gives each step's batch: Data unless set (a user's dataset).
	Source     Source
	batch, mbs int
	pf         *Prefetcher // Source's, on a device backend (source)
	steps      int         // the run's length (TrainOptions.Steps): nothing is made ahead past it
	gradNorm   float64     // the last step's global gradient norm (with clipping)
	report     StepReport  // the step Compute ended
	sel        *Selector   // selective backprop's, when TrainOptions.Selective is set
	backprop   int         // the samples of the last step Compute ran that had a backward pass
}

// NewTrainer prepares the model, its data and optimizer, on a backend (on:
// at most one; none is CPU()).
func NewTrainer(g *dag.Graph, o TrainOptions, on ...Backend) (*Trainer, error) {
	if o.Batch == 0 {
		o.Batch = int(g.BatchSize())
	}
	if o.MicroBatch == 0 {
		o.MicroBatch = o.Batch
	}
	if o.Batch < 1 || o.MicroBatch < 1 || o.Batch%o.MicroBatch != 0 {
		return nil, fmt.Errorf("--micro-batch: %d does not divide the batch of %d", o.MicroBatch, o.Batch)
	}
	all := allOps(g)
	ex, err := NewExecutor(g, all, g.Seed(), on...)
	if err != nil {
		return nil, err
	}
	data, err := NewDataset(g)
	if err != nil {
		return nil, err
	}
	if err := ex.SetOptimizer(o); err != nil {
		return nil, err
	}
	t := &Trainer{G: g, Ex: ex, Data: data, Source: data, batch: o.Batch, mbs: o.Batch / o.MicroBatch, steps: o.Steps}
	if o.Selective != nil {
		if err := CheckSelective(g); err != nil {
			return nil, err
		}
		if t.sel, err = NewSelector(*o.Selective, g.Seed()); err != nil {
			return nil, err
		}
		ex.SampleLoss = true
	}
	return t, nil
}

// Step trains on step's batch: every micro-batch forward and backward, their
// gradients accumulated, clipped by their global norm (ClipGradNorm), one
// optimizer step at the step's rate. It returns the batch's mean loss
// before the update and the batch itself.
func (t *Trainer) Step(step int) (float64, map[string]*Value[float32], error) {
	loss, batch, err := t.Compute(step)
	if err != nil {
		return 0, nil, err
	}
	return loss, batch, t.Apply(false)
}

// Compute is Step up to the optimizer's update: every micro-batch forward
// and backward, their gradients accumulated, then the step ended (EndStep:
// checked for values that are not finite, clipped). It returns the batch's
// mean loss and the batch. Apply follows; Report says what EndStep found.
func (t *Trainer) Compute(step int) (float64, map[string]*Value[float32], error) {
	batch, err := t.source().Inputs(step, t.batch, nil)
	if err != nil {
		return 0, nil, err
	}
	b := t.batch / t.mbs
	lossName := t.G.Op(t.G.Loss()).Name
	weight := float32(b) / float32(t.batch)
	var losses []float64 // the batch's, with selective backprop
	t.backprop = 0
	for j := 0; j < t.mbs; j++ {
		feeds := map[string]*Value[float32]{}
		for name, v := range batch {
			feeds[name] = SliceRows(v, j*b, (j+1)*b)
		}
		if _, err := t.Ex.Forward(j, Position{Step: step, Sample: j * b}, feeds); err != nil {
			return 0, nil, err
		}
		kept, err := t.select1(step, j, j*b, b)
		if err != nil {
			return 0, nil, err
		}
		losses, t.backprop = append(losses, t.Ex.SampleLosses(j)...), t.backprop+kept
		seed := &Value[float32]{Shape: []int{1}, Data: []float32{weight}}
		if _, err := t.Ex.Backward(j, map[string]*Value[float32]{lossName: seed}, true); err != nil {
			return 0, nil, err
		}
	}
	t.Ex.Selected(t.backprop, t.batch)
	if t.report, err = t.Ex.EndStep(context.Background(), step, nil); err != nil {
		return 0, nil, err
	}
	if t.sel != nil {
		t.sel.Record(losses)
	}
	return t.report.Loss, batch, nil
}

// select1 decides which rows of micro-batch j (its first sample first, b
// rows) are kept, with selective backprop, and cuts it to them; it says
// how many have a backward pass (all b without).
func (t *Trainer) select1(step, j, first, b int) (int, error) {
	if t.sel == nil {
		return b, nil
	}
	kept := t.sel.KeepRows(step, first, t.Ex.SampleLosses(j))
	return len(kept), t.Ex.Compact(j, kept)
}

// Backprop is how many samples of the last step Compute ran had a
// backward pass: the batch, but with selective backprop.
func (t *Trainer) Backprop() int { return t.backprop }

// Selector is selective backprop's selector (nil without): its history is
// what a checkpoint of the trainer would keep.
func (t *Trainer) Selector() *Selector { return t.sel }

// source is Source, through a Prefetcher where the executor runs on a
// device: the next step's batch is made while the device computes this
// one's, off the step's critical path (on the CPU backend the cores are
// the step's).
func (t *Trainer) source() Source {
	ds, synthetic := t.Source.(*Dataset) // a user's dataset reads ahead on its own
	if t.Ex.Device() == nil || !synthetic {
		return t.Source
	}
	if t.pf == nil || t.pf.Source() != Source(ds) {
		t.Close()
		t.pf = NewPrefetcher(ds)
		t.pf.Until = t.steps
	}
	return t.pf
}

// Close waits for the batch being made ahead, if any: before the data it
// reads goes away.
func (t *Trainer) Close() {
	if t.pf != nil {
		t.pf.Wait()
	}
}

// Apply ends the step Compute began (Executor.ApplyStep): the optimizer
// steps on the accumulated gradients or, with skip, the step is undone (the
// buffers its forward passes updated restored, the optimizer untouched, as
// mixed-precision loss scaling skips a step); the gradients are cleared
// either way.
func (t *Trainer) Apply(skip bool) error {
	if !skip {
		t.gradNorm = t.report.GradNorm
	}
	defer PaceGC()
	return t.Ex.ApplyStep(skip)
}

// Report is what ending the last step Compute ran found (EndStep).
func (t *Trainer) Report() StepReport { return t.report }

// GradNorm is the last step's global gradient norm before clipping (0
// without ClipGradNorm): what clip_grad_norm_ returns. A skipped step
// leaves it as the step before left it.
func (t *Trainer) GradNorm() float64 { return t.gradNorm }

// Evaluate runs src through the model forward in evaluation mode, in
// micro-batches of the trainer's size (the last of a batch smaller), after
// step training steps.
func (t *Trainer) Evaluate(step int, src EvalSource) (EvalResult, error) {
	b := t.batch / t.mbs
	var sums EvalSums
	for k := 0; k < src.Batches(); k++ {
		batch, err := src.Batch(k, nil)
		if err != nil {
			return EvalResult{}, err
		}
		n := batchRows(batch)
		for lo := 0; lo < n; lo += b {
			hi := min(lo+b, n)
			feeds := map[string]*Value[float32]{}
			for name, v := range batch {
				feeds[name] = SliceRows(v, lo, hi)
			}
			out, err := t.Ex.Evaluate(0, Position{Step: step, Sample: lo}, feeds)
			if err != nil {
				return EvalResult{}, err
			}
			s, err := t.Ex.LossSums(hi-lo, func(name string) *Value[float32] {
				if v := out[name]; v != nil {
					return v
				}
				return feeds[name]
			})
			if err != nil {
				return EvalResult{}, err
			}
			sums.Add(s)
		}
	}
	return sums.Result(step), nil
}

// batchRows is the samples of a batch (its values' first axis).
func batchRows(batch map[string]*Value[float32]) int {
	for _, v := range batch {
		return v.Shape[0]
	}
	return 0
}
