package plan

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/graphpipe/graphpipe/dag"
)

// OpTimesFormat is the version tag of an op-times file.
const OpTimesFormat = "graphpipe/optimes@1"

// OpTimes are one model's ops timed on one device through the stage executor
// (graphpipe profile --model): what the paper's planner prices with, profiled
// per-op forward and backward times at power-of-two micro-batch sizes. With
// search.Options.OpTimes set, the cost model takes every op's compute time from
// here instead of from FLOPs and bytes; links, all-reduce, the optimizer step
// and memory still come from the device profile.
type OpTimes struct {
	Format string `json:"format"`
	Model  string `json:"model"`
	SHA256 string `json:"model_sha256"` // OpsHash of the model the times belong to
	Device string `json:"device"`       // where they were measured, in words
	// Ops maps every op's name to its times per call.
	Ops map[string]OpSeries `json:"ops"`
	// Inputs, where measured, maps model inputs to the seconds a worker
	// takes to make each for a batch of InputBatch samples (the model's
	// synthetic data, a target with its teacher's labels): what a stage
	// that reads it pays before its first action of an iteration. Files
	// written before it have none.
	Inputs     map[string]float64 `json:"input_s,omitempty"`
	InputBatch int64              `json:"input_batch,omitempty"`
}

// OpSeries is one op's time per call at each measured per-device micro-batch.
type OpSeries struct {
	MicroBatch []int64   `json:"micro_batch"`   // ascending
	Forward    []float64 `json:"forward_s"`     // seconds per call
	InputGrad  []float64 `json:"input_grad_s"`  // backward for the inputs (B)
	WeightGrad []float64 `json:"weight_grad_s"` // backward for the weights (W); 0 without weights
}

// OpTimesError is an op-times file that cannot be used; Field names what is
// at fault.
type OpTimesError struct {
	Field, Msg string
}

func (e *OpTimesError) Error() string { return fmt.Sprintf("op times: %s: %s", e.Field, e.Msg) }

// DecodeOpTimes reads and checks an op-times file. Unknown fields are refused.
func DecodeOpTimes(data []byte) (*OpTimes, error) {
	var t OpTimes
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return nil, &OpTimesError{"file", err.Error()}
	}
	if dec.More() {
		return nil, &OpTimesError{"file", "more than one JSON value"}
	}
	return &t, t.Validate()
}

// Encode renders the times as indented JSON, ops in name order.
func (t *OpTimes) Encode() ([]byte, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	data, err := json.MarshalIndent(t, "", "  ")
	return append(data, '\n'), err
}

// Validate checks the format tag and that every series is whole: ascending
// positive micro-batches, one time in [0, MaxSeconds] per micro-batch and
// pass (bounds.go: larger ones overflow the cost model's sums).
func (t *OpTimes) Validate() error {
	switch {
	case t.Format != OpTimesFormat:
		return &OpTimesError{"format", fmt.Sprintf("want %q, got %q", OpTimesFormat, t.Format)}
	case t.SHA256 == "":
		return &OpTimesError{"model_sha256", "required"}
	case len(t.Ops) == 0:
		return &OpTimesError{"ops", "no op is timed"}
	}
	names := make([]string, 0, len(t.Ops))
	for name := range t.Ops {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := t.Ops[name].validate(); err != nil {
			return &OpTimesError{"ops." + name, err.Error()}
		}
	}
	if len(t.Inputs) > 0 && t.InputBatch < 1 {
		return &OpTimesError{"input_batch", fmt.Sprintf("the batch the inputs were made for must be positive, got %d", t.InputBatch)}
	}
	inputs := make([]string, 0, len(t.Inputs))
	for name := range t.Inputs {
		inputs = append(inputs, name)
	}
	sort.Strings(inputs)
	for _, name := range inputs {
		if err := seconds("input_s."+name, t.Inputs[name]); err != nil {
			return &OpTimesError{"input_s." + name, strings.TrimPrefix(err.Error(), "input_s."+name+": ")}
		}
	}
	return nil
}

// InputSeconds is what making the named model inputs for a batch of batch
// samples costs by these times (in proportion to the batch they were
// measured at); 0 for inputs not measured.
func (t *OpTimes) InputSeconds(names []string, batch int64) float64 {
	if t == nil || t.InputBatch < 1 {
		return 0
	}
	s := 0.0
	for _, n := range names {
		s += t.Inputs[n]
	}
	return s * float64(batch) / float64(t.InputBatch)
}

func (s OpSeries) validate() error {
	n := len(s.MicroBatch)
	if n == 0 {
		return fmt.Errorf("micro_batch: empty")
	}
	for i, m := range s.MicroBatch {
		if m < 1 || i > 0 && m <= s.MicroBatch[i-1] {
			return fmt.Errorf("micro_batch: must be positive and ascending, got %v", s.MicroBatch)
		}
	}
	for _, f := range []struct {
		name string
		v    []float64
	}{{"forward_s", s.Forward}, {"input_grad_s", s.InputGrad}, {"weight_grad_s", s.WeightGrad}} {
		if len(f.v) != n {
			return fmt.Errorf("%s: %d values for %d micro-batch sizes", f.name, len(f.v), n)
		}
		for _, v := range f.v {
			if err := seconds(f.name, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// OpsHash is the SHA-256 of the model's canonical rendering with its seed
// and batch size cleared: what op times depend on (the ops, their shapes
// per sample), so that times measured once serve every seed and batch.
func OpsHash(g *dag.Graph) string {
	m := *g.Model()
	m.Seed, m.BatchSize = 0, 1
	sum := sha256.Sum256(dag.Write(&m))
	return hex.EncodeToString(sum[:])
}
