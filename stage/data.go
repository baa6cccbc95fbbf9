package stage

import (
	"fmt"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// teacherSeed separates the teacher's parameters from the student's.
const teacherSeed = 0x7eac4e

// Dataset is a model's default synthetic data, reproducible from (seed,
// step): float inputs ~ N(0, 1), int32 inputs uniform in their range, and
// the loss's target input produced by a teacher, the same model with
// parameters from another seed, so that the loss can really fall:
// softmax_cross_entropy gets the teacher's argmax, mse its prediction,
// bce_with_logits 1 where its logit is positive.
type Dataset struct {
	g       *dag.Graph
	seed    int64
	target  string    // the model input the teacher labels, "" if none
	teacher *Executor // made at the first label: only a stage that reads the target needs one
	dev     *cuda.Device
	rows    int // on dev: samples per teacher forward pass
}

// NewDataset prepares the data of g.
func NewDataset(g *dag.Graph) (*Dataset, error) {
	d := &Dataset{g: g, seed: g.Seed()}
	if t := g.OpInputs(g.Loss())[1]; t.Producer < 0 {
		d.target = t.Name
	}
	return d, nil
}

// UseDevice runs the teacher on dev (its parameters, which never change,
// uploaded once), rows samples per forward pass (0: the whole batch): on
// a GPU stage, labelling a batch would otherwise cost a whole forward pass
// of the model on the host. Call it before the first batch.
func (d *Dataset) UseDevice(dev *cuda.Device, rows int) { d.dev, d.rows = dev, rows }

// makeTeacher builds the teacher: every op but the loss, with parameters
// from another seed.
func (d *Dataset) makeTeacher() error {
	var ops []int
	for i := 0; i < d.g.NumOps(); i++ {
		if i != d.g.Loss() {
			ops = append(ops, i)
		}
	}
	t, err := NewExecutor(d.g, ops, d.g.Seed()^teacherSeed)
	if err != nil {
		return err
	}
	if d.dev != nil {
		if err := t.UseDevice(d.dev); err != nil {
			return err
		}
	}
	d.teacher = t
	return nil
}

// Batch is step's batch of n samples, every model input by name.
func (d *Dataset) Batch(step, n int) (map[string]*Value[float32], error) {
	return d.Inputs(step, n, nil)
}

// Inputs is step's batch of n samples of the named inputs only (nil: all).
// Each input depends on (seed, step, name) alone, so a stage can make just
// the ones it reads; only a stage that reads the target runs the teacher.
func (d *Dataset) Inputs(step, n int, names map[string]bool) (map[string]*Value[float32], error) {
	if names != nil && d.target != "" && names[d.target] {
		names = nil // the teacher reads every input
	}
	out := map[string]*Value[float32]{}
	for _, in := range d.g.Inputs() {
		if names != nil && !names[in.Name] {
			continue
		}
		shape := append([]int{n}, toIntsShape(in.Shape)...)
		r := rng(d.seed, "data", fmt.Sprint(step), in.Name)
		v := &Value[float32]{Shape: shape}
		if in.DType == dag.Int32 {
			v.Ints = make([]int32, sizeOf(shape))
			for i := range v.Ints {
				v.Ints[i] = int32(in.Range[0] + r.Int64N(in.Range[1]-in.Range[0]))
			}
		} else {
			v.Data = make([]float32, sizeOf(shape))
			for i := range v.Data {
				v.Data[i] = float32(r.NormFloat64())
			}
		}
		out[in.Name] = v
	}
	if d.target != "" && out[d.target] != nil {
		if err := d.label(out, step); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func sizeOf(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}

// label replaces the target input by the teacher's answer, d.rows samples
// at a time on a device (the whole batch at once would hold every sample's
// activations there).
func (d *Dataset) label(batch map[string]*Value[float32], step int) error {
	if d.teacher == nil {
		if err := d.makeTeacher(); err != nil {
			return err
		}
	}
	n := batch[d.target].Shape[0]
	if d.dev == nil || d.rows <= 0 || d.rows >= n {
		return d.labelRows(batch, step)
	}
	for lo := 0; lo < n; lo += d.rows {
		part := map[string]*Value[float32]{}
		for name, v := range batch {
			part[name] = SliceRows(v, lo, min(lo+d.rows, n))
		}
		if err := d.labelRows(part, step); err != nil {
			return err
		}
	}
	return nil
}

// labelRows labels batch (its rows share the caller's storage) in one
// forward pass of the teacher.
func (d *Dataset) labelRows(batch map[string]*Value[float32], step int) (err error) {
	mb := -1 - step // the teacher's micro-batch ids never meet a caller's
	outs, err := d.teacher.Forward(mb, batch)
	if err != nil {
		return err
	}
	// the teacher never runs backward; on a device, its output stays valid
	// until the micro-batch is released
	defer func() {
		if e := d.teacher.release(mb); err == nil {
			err = e
		}
	}()
	pred := outs[d.g.OpInputs(d.g.Loss())[0].Name]
	tgt := batch[d.target]
	switch d.g.Op(d.g.Loss()).Kind {
	case dag.SoftmaxCrossEntropy:
		c := pred.Shape[1]
		for b := range tgt.Ints {
			best := 0
			for j := 1; j < c; j++ {
				if pred.Data[b*c+j] > pred.Data[b*c+best] {
					best = j
				}
			}
			tgt.Ints[b] = int32(best)
		}
	case dag.MSE:
		copy(tgt.Data, pred.Data)
	case dag.BCEWithLogits:
		for i, z := range pred.Data {
			tgt.Data[i] = 0
			if z > 0 {
				tgt.Data[i] = 1
			}
		}
	}
	return nil
}
