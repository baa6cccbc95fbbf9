package stage

import (
	"fmt"
	"math"

	"github.com/graphpipe/graphpipe/dag"
)

// Source gives training batches: step's batch of n samples of the named
// model inputs (nil: all), batch-major, int inputs in Ints. The synthetic
// Dataset is one; a user's dataset is another (runtime.DataSource). A batch
// must be a function of the step alone, so that every plan, worker and
// restart sees the same one.
type Source interface {
	Inputs(step, n int, names map[string]bool) (map[string]*Value[float32], error)
}

// EvalSource gives an evaluation set in batches: Batches() of them, each
// of up to the batch size, the last one possibly smaller.
type EvalSource interface {
	Batches() int
	Batch(k int, names map[string]bool) (map[string]*Value[float32], error)
}

// EvalResult is one evaluation: the mean loss over its samples and, for
// softmax cross-entropy, the fraction of labels whose logit is the largest
// (NaN otherwise).
type EvalResult struct {
	Step     int     `json:"step"` // the training steps done before it
	Samples  int     `json:"samples"`
	Loss     float64 `json:"loss"`
	Accuracy float64 `json:"accuracy"`
}

// HasAccuracy says whether the evaluation measured accuracy.
func (r EvalResult) HasAccuracy() bool { return !math.IsNaN(r.Accuracy) }

// EvalSums accumulates an evaluation: Σ loss·samples, correct labels,
// labels and samples seen.
type EvalSums struct {
	LossSum          float64
	Correct, Labels  int
	Samples          int
	MeasuresAccuracy bool
}

// Add folds in another part of the same evaluation.
func (s *EvalSums) Add(o EvalSums) {
	s.LossSum += o.LossSum
	s.Correct += o.Correct
	s.Labels += o.Labels
	s.Samples += o.Samples
	s.MeasuresAccuracy = s.MeasuresAccuracy || o.MeasuresAccuracy
}

// Result is the evaluation's mean loss and accuracy after step steps.
func (s EvalSums) Result(step int) EvalResult {
	r := EvalResult{Step: step, Samples: s.Samples, Loss: s.LossSum / float64(max(s.Samples, 1)), Accuracy: math.NaN()}
	if s.MeasuresAccuracy {
		r.Accuracy = float64(s.Correct) / float64(max(s.Labels, 1))
	}
	return r
}

// Evaluate runs micro-batch mb forward in evaluation mode (Position.Eval)
// and forgets it: nothing is stashed for a backward pass. The outputs are
// the stage's own, on the host.
func (e *Executor) Evaluate(mb int, pos Position, feeds map[string]*Value[float32]) (map[string]*Value[float32], error) {
	pos.Eval = true
	out, err := e.Forward(mb, pos, feeds)
	if err != nil {
		return nil, err
	}
	e.be.detach(out) // host copies outlive the micro-batch's device memory
	return out, e.release(mb)
}

// LossSums is what one evaluated micro-batch of rows adds to an
// evaluation at the stage holding the loss op: its loss times its rows,
// and for softmax cross-entropy its correct labels. vals holds the loss
// op's output and inputs by name (outputs and feeds of the stage).
func (e *Executor) LossSums(rows int, vals func(name string) *Value[float32]) (EvalSums, error) {
	l := e.g.Loss()
	op := e.g.Op(l)
	loss := vals(op.Name)
	if loss == nil || len(loss.Data) == 0 {
		return EvalSums{}, fmt.Errorf("stage: evaluation: the loss %q was not computed", op.Name)
	}
	s := EvalSums{LossSum: float64(loss.Data[0]) * float64(rows), Samples: rows}
	if op.Kind == dag.SoftmaxCrossEntropy {
		in := e.g.OpInputs(l)
		logits, labels := vals(in[0].Name), vals(in[1].Name)
		if logits == nil || labels == nil {
			return EvalSums{}, fmt.Errorf("stage: evaluation: the loss's inputs are not at hand")
		}
		s.Correct, s.Labels, s.MeasuresAccuracy = Correct(logits, labels), len(labels.Ints), true
	}
	return s, nil
}

// Correct counts the labels whose logit is the largest of their row
// (logits [..., classes], labels [...]; ties go to the first).
func Correct(logits, labels *Value[float32]) int {
	n := len(labels.Ints)
	if n == 0 {
		return 0
	}
	c := len(logits.Data) / n
	right := 0
	for i, want := range labels.Ints {
		row := logits.Data[i*c : (i+1)*c]
		best := 0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		if int32(best) == want {
			right++
		}
	}
	return right
}
