package stage

import (
	"fmt"
	"sort"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor"
)

// StateOf checks an init file's entries against a model's parameters and
// buffers, by name: every one the model has must be there, float32, with
// its shape, and nothing else. It returns the values by name, or one line
// per problem.
func StateOf(g *dag.Graph, entries []tensor.Named) (map[string]*Value[float32], []string) {
	want := map[string]dag.Param{}
	for i := 0; i < g.NumOps(); i++ {
		for _, p := range append(append([]dag.Param(nil), g.Params(i)...), g.Buffers(i)...) {
			want[p.Key] = p
		}
	}
	out := map[string]*Value[float32]{}
	var problems []string
	for _, e := range entries {
		p, ok := want[e.Name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%q is not a parameter or buffer of model %q", e.Name, g.Name()))
		case e.F32 == nil && tensor.Size(e.Shape) > 0:
			problems = append(problems, fmt.Sprintf("%q holds integers, want float32", e.Name))
		case !sameShape(e.Shape, p.Shape):
			problems = append(problems, fmt.Sprintf("%q has shape %v, the model's is %v", e.Name, e.Shape, p.Shape))
		default:
			out[e.Name] = &Value[float32]{Shape: append([]int(nil), e.Shape...), Data: e.F32}
		}
	}
	var missing []string
	for name := range want {
		if _, ok := out[name]; !ok && !hasName(entries, name) {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	for _, name := range missing {
		problems = append(problems, fmt.Sprintf("%q is missing (the model's %v)", name, want[name].Shape))
	}
	return out, problems
}

func sameShape(a []int, b dag.Shape) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if int64(a[i]) != b[i] {
			return false
		}
	}
	return true
}

func hasName(entries []tensor.Named, name string) bool {
	for _, e := range entries {
		if e.Name == name {
			return true
		}
	}
	return false
}

// LoadState copies values by name into the executor's parameters and
// buffers (those it has; StateOf has checked the names and shapes), and
// tells the backend they changed: on a device they are uploaded before
// the next pass or piece of a step reads them.
func (e *Executor) LoadState(vals map[string]*Value[float32]) {
	var names []string
	for name, dst := range e.State() {
		if v, ok := vals[name]; ok {
			copy(dst.Data, v.Data)
			names = append(names, name)
		}
	}
	if names != nil {
		e.be.changed(names)
	}
	e.loadedState()
}
