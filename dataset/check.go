package dataset

import (
	"fmt"
	"strings"

	"github.com/graphpipe/graphpipe/dag"
)

// want is what the model asks of a tensor's values.
type want struct {
	ints  bool
	rng   *[2]int64 // int inputs: [lo, hi), nil for any int32
	label bool      // the loss's target
}

// Check holds the set against g's inputs: every input present with its
// per-sample shape and a dtype it takes (float32 for a float input; int32
// or int64 for an int input), no other tensor, and one sample count for
// all. It returns every problem, one line each, in one error; on success
// Read checks values against the inputs' ranges from then on.
func (s *Set) Check(g *dag.Graph) error {
	var lines []string
	inputs := map[string]bool{}
	label := ""
	if l := g.Loss(); l >= 0 {
		if t := g.OpInputs(l); len(t) > 1 && t[1].Producer < 0 {
			label = t[1].Name
		}
	}
	for _, in := range g.Inputs() {
		inputs[in.Name] = true
		t := s.Tensors[in.Name]
		if t == nil {
			lines = append(lines, errorf(s.Path, in.Name, -1, "missing: the model's input %q (%s %v per sample) has no tensor", in.Name, in.DType, in.Shape).Error())
			continue
		}
		if msg := fits(t, in); msg != "" {
			lines = append(lines, errorf(t.File(), in.Name, -1, "%s", msg).Error())
			continue
		}
		t.want = &want{ints: in.DType == dag.Int32, rng: in.Range, label: in.Name == label}
	}
	for _, name := range s.Names() {
		if !inputs[name] {
			lines = append(lines, errorf(s.Tensors[name].File(), name, -1, "is not an input of model %q (its inputs: %s)", g.Name(), inputNames(g)).Error())
		}
	}
	if len(lines) == 0 {
		lines = s.checkCounts()
	}
	if len(lines) > 0 {
		return &CheckError{Lines: lines}
	}
	return nil
}

// CheckError is every problem Check found, a line each.
type CheckError struct{ Lines []string }

func (e *CheckError) Error() string { return strings.Join(e.Lines, "\n") }

// fits says what keeps tensor t from feeding input in ("" when nothing).
func fits(t *Tensor, in dag.Input) string {
	shape := make([]int, len(in.Shape))
	for i, d := range in.Shape {
		shape[i] = int(d)
	}
	if !sameInts(t.Shape, shape) {
		return fmt.Sprintf("is %v per sample (shape %v), the model's input is %v", t.Shape, append([]int{t.N}, t.Shape...), shape)
	}
	switch {
	case in.DType == dag.Int32 && t.DType == Float32:
		return fmt.Sprintf("is float32; the model's input is int32 (store int32 or int64)")
	case in.DType != dag.Int32 && t.DType != Float32:
		return fmt.Sprintf("is %s; the model's input is float32", t.DType)
	}
	return ""
}

func (s *Set) checkCounts() []string {
	names := s.Names()
	first := s.Tensors[names[0]]
	var lines []string
	for _, name := range names[1:] {
		if t := s.Tensors[name]; t.N != first.N {
			lines = append(lines, errorf(t.File(), name, -1, "has %d samples, %q has %d", t.N, first.Name, first.N).Error())
		}
	}
	if len(lines) == 0 && first.N == 0 {
		lines = append(lines, errorf(s.Path, "", -1, "holds no samples").Error())
	}
	return lines
}

func inputNames(g *dag.Graph) string {
	var out []string
	for _, in := range g.Inputs() {
		out = append(out, in.Name)
	}
	return strings.Join(out, ", ")
}
