package stage

import "fmt"

// Two versions of the weights (PipeDream-2BW; microbatch's schedule 2bw).
// A pipeline without a flush takes batch t's gradient at the weights as
// they were before the last update and applies it to the newest:
//
//	W(t+1) = W(t) − lr · ∇f_t(W(t−1)),   W(−1) = W(0)
//
// so every stage is one update stale. An executor that keeps two versions
// (SetTwoVersions) holds the newest in Params, which the optimizer steps,
// and the one before in a copy of its own (the stale version). The passes
// of a micro-batch of the step being accumulated read the stale version;
// those of the next step's micro-batches, which a pipeline runs ahead of
// the update, read the newest; an evaluation reads the newest. ApplyStep
// first copies the newest into the stale version, then steps the newest:
// two versions, never more. A micro-batch of any other step is refused
// (VersionError): its weights would be a third version.
//
// The stale version is part of the optimizer's state (OptimizerState's
// "<param>.stale" slots; of a sharded stage, its shard's pieces), so a
// checkpoint carries both versions and a resumed run goes on bit for bit;
// state without them starts afresh, the loaded parameters as both
// versions. The one-process Trainer keeps two versions the same way and
// runs each step on the stale one: the reference a 2bw pipeline equals.
//
// Refused: the CUDA backend (the device keeps one version of the flat
// state and of its bf16 copy), buffers (batch_norm's running statistics
// move with forwards that run ahead of an update, which a checkpoint could
// not place) and selective backprop (a batch's kept samples would depend on
// losses of a batch not yet accounted).

// staleSlot is the optimizer-state slot that holds a parameter's stale
// version.
const staleSlot = "stale"

// versions is an executor's second version of its weights.
type versions struct {
	stale map[string]*Value[float32] // W(t−1) by name; nil until a pass or a load makes it
	step  int                        // the step being accumulated, whose update comes next; -1 until the first training pass
}

// VersionError is a pass that would read a third version of the weights,
// or an executor that cannot keep two.
type VersionError struct {
	Step, Current int
	Msg           string
}

func (e *VersionError) Error() string {
	if e.Msg != "" {
		return "stage: two weight versions: " + e.Msg
	}
	return fmt.Sprintf("stage: two weight versions: a pass of step %d while step %d accumulates reads neither (its weights would be a third version)", e.Step, e.Current)
}

// SetTwoVersions makes the executor keep two versions of its weights
// (see above). Call it before the first step.
func (e *Executor) SetTwoVersions() error {
	switch {
	case e.be.Name() != "cpu":
		return &VersionError{Msg: fmt.Sprintf("the %s backend keeps one version of the weights: two run on the cpu backend", e.be.Name())}
	case len(e.Buffers) > 0:
		return &VersionError{Msg: fmt.Sprintf("buffer %q: buffers (batch_norm's running statistics) move with the forwards that run ahead of an update", e.BufferNames()[0])}
	case e.SampleLoss:
		return &VersionError{Msg: "selective backprop keeps samples by losses of a batch not yet accounted"}
	case e.stepping:
		return &VersionError{Msg: "set in the middle of a step"}
	}
	e.versions = &versions{step: -1}
	return nil
}

// TwoVersions says whether the executor keeps two versions of its weights.
func (e *Executor) TwoVersions() bool { return e.versions != nil }

// readFor chooses the version the passes of a micro-batch at pos read:
// the newest for an evaluation, or without two versions; the stale one
// for the step being accumulated; the newest for the next step's.
func (e *Executor) readFor(pos Position) error {
	v := e.versions
	e.reading = nil
	if v == nil || pos.Eval {
		return nil
	}
	if v.step < 0 {
		v.step = pos.Step
	}
	if v.stale == nil {
		v.stale = cloneValues(e.Params)
	}
	switch {
	case pos.Step == v.step:
		e.reading = v.stale
	case pos.Step == v.step+1 && e.lossOp != "":
		return &VersionError{Step: pos.Step, Current: v.step, Msg: fmt.Sprintf("the stage holding the loss runs a forward of step %d ahead of step %d's update: its losses would mix", pos.Step, v.step)}
	case pos.Step != v.step+1:
		return &VersionError{Step: pos.Step, Current: v.step}
	}
	return nil
}

// turnVersions is ApplyStep's first piece with two versions: the newest
// becomes the stale version, which the update about to step the newest
// leaves behind; the next step accumulates.
func (e *Executor) turnVersions(step int) {
	v := e.versions
	if v == nil {
		return
	}
	if v.stale == nil {
		v.stale = cloneValues(e.Params)
	} else {
		for name, p := range e.Params {
			copy(v.stale[name].Data, p.Data)
		}
	}
	v.step = step + 1
}

// loadedState drops the stale version after LoadState: the parameters
// loaded are both versions, unless the optimizer's state brings its own.
func (e *Executor) loadedState() {
	if e.versions != nil {
		e.versions.stale = nil
	}
}

// withStale adds the stale version to the optimizer's state st as
// "<param>.stale" slots (a sharded stage's shard of it).
func (e *Executor) withStale(st map[string][]float32) map[string][]float32 {
	if e.versions == nil {
		return st
	}
	stale := e.versions.stale
	if stale == nil {
		stale = e.Params // no pass yet: both versions are the parameters
	}
	full := make(map[string][]float32, len(stale))
	for name, v := range stale {
		full[name+"."+staleSlot] = v.Data
	}
	if e.shard != nil {
		full = e.shard.slice(full)
	}
	out := make(map[string][]float32, len(st)+len(full))
	for k, v := range st {
		out[k] = v
	}
	for k, v := range full {
		out[k] = append([]float32(nil), v...)
	}
	return out
}

// takeStale removes the "<param>.stale" slots from st (a whole stage's
// state, as a checkpoint holds it) and, with two versions, makes them the
// stale version: every parameter's, or none (the parameters then serve).
func (e *Executor) takeStale(st map[string][]float32) (map[string][]float32, error) {
	rest := make(map[string][]float32, len(st))
	found := map[string][]float32{}
	for slot, vals := range st {
		if name, s := splitSlot(slot); s == staleSlot {
			found[name] = vals
			continue
		}
		rest[slot] = vals
	}
	if e.versions == nil || len(found) == 0 {
		return rest, nil
	}
	stale := make(map[string]*Value[float32], len(e.Params))
	for _, name := range sortedNames(e.Params) {
		p := e.Params[name]
		vals, ok := found[name]
		if !ok || len(vals) != len(p.Data) {
			return nil, &VersionError{Msg: fmt.Sprintf("the optimizer state's stale version of %q: %d values of %d", name, len(vals), len(p.Data))}
		}
		stale[name] = &Value[float32]{Shape: p.Shape, Data: append([]float32(nil), vals...)}
	}
	e.versions.stale = stale
	return rest, nil
}

// staleBytes is what the stale version holds.
func (e *Executor) staleBytes() int64 {
	if e.versions == nil {
		return 0
	}
	var n int64
	for _, p := range e.Params {
		n += 4 * int64(len(p.Data))
	}
	return n
}

// cloneValues is a deep copy of vals.
func cloneValues(vals map[string]*Value[float32]) map[string]*Value[float32] {
	out := make(map[string]*Value[float32], len(vals))
	for n, v := range vals {
		out[n] = v.Clone()
	}
	return out
}
