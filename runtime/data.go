package runtime

import (
	"errors"
	"fmt"
	"maps"
	"sync"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/dataset"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor"
)

// DataSpec is a run's own data (package dataset), as every worker that
// reads model inputs opens it on its own host, and its evaluation set.
type DataSpec struct {
	Path           string `json:"path,omitempty"` // "": the model's synthetic data
	Shuffle        bool   `json:"shuffle"`
	AllowNonfinite bool   `json:"allow_nonfinite,omitempty"`
	// Fingerprint is the coordinator's dataset.Fingerprint of Path: a
	// worker whose files differ refuses to start.
	Fingerprint string `json:"fingerprint,omitempty"`

	EvalPath        string `json:"eval_path,omitempty"`
	EvalFingerprint string `json:"eval_fingerprint,omitempty"`
	EvalSamples     int    `json:"eval_samples,omitempty"` // the evaluation set's size
	// EvalEvery > 0 evaluates after every that many steps; with EvalPath
	// set, an evaluation always follows the last step.
	EvalEvery int `json:"eval_every,omitempty"`
}

// EvalDue says whether an evaluation follows step n (counted from 0) of
// steps.
func (d *DataSpec) EvalDue(n, steps int) bool {
	if d == nil || d.EvalPath == "" {
		return false
	}
	return n == steps-1 || d.EvalEvery > 0 && (n+1)%d.EvalEvery == 0
}

// DataError is a refusal of a run's data (a file, a tensor, a row): the
// user's to fix, so no restart can help; the command exits 2.
type DataError struct{ Msg string }

func (e *DataError) Error() string { return e.Msg }

// dataErr marks errors about the data as DataErrors.
func dataErr(err error) error {
	var de *dataset.Error
	var ce *dataset.CheckError
	if errors.As(err, &de) && !de.Changed || errors.As(err, &ce) {
		return &DataError{err.Error()}
	}
	return err
}

// IsDataError says whether err is a refusal of the data (not a data file
// that changed while in use: the environment's fault, exit 1).
func IsDataError(err error) bool {
	var de *DataError
	var de2 *dataset.Error
	var ce *dataset.CheckError
	return errors.As(err, &de) || errors.As(err, &de2) && !de2.Changed || errors.As(err, &ce)
}

// OpenData opens path and checks it against g's inputs.
func OpenData(path string, g *dag.Graph, allowNonfinite bool) (*dataset.Set, error) {
	s, err := dataset.Open(path)
	if err != nil {
		return nil, err
	}
	s.AllowNonfinite = allowNonfinite
	if err := s.Check(g); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// DataSource gives training batches from a dataset in its Order. While a
// step trains, the next step's batch is read in the background (the same
// inputs), so that reading overlaps computing.
type DataSource struct {
	Set   *dataset.Set
	Order *dataset.Order

	mu   sync.Mutex // guards next
	next *prefetch
}

// prefetch is a batch being read ahead.
type prefetch struct {
	step  int
	names map[string]bool
	done  chan struct{}
	got   map[string]tensor.Named
	err   error
}

// NewDataSource is set's batches of batch samples, shuffled by seed.
func NewDataSource(set *dataset.Set, batch int, seed int64, shuffle bool) (*DataSource, error) {
	o, err := dataset.NewOrder(set.N, batch, seed, shuffle)
	if err != nil {
		return nil, &dataset.Error{Path: set.Path, Row: -1, Msg: err.Error()}
	}
	return &DataSource{Set: set, Order: o}, nil
}

// Inputs is step's batch (stage.Source).
func (d *DataSource) Inputs(step, n int, names map[string]bool) (map[string]*stage.Value[float32], error) {
	if n != d.Order.Batch {
		return nil, fmt.Errorf("data: a batch of %d asked of an order of batches of %d", n, d.Order.Batch)
	}
	var got map[string]tensor.Named
	var err error
	if p := d.take(step, names); p != nil {
		<-p.done
		got, err = p.got, p.err
	} else {
		got, err = d.Set.Read(names, d.Order.Rows(step))
	}
	d.ahead(step+1, names)
	if err != nil {
		return nil, fmt.Errorf("step %d: %w", step, err)
	}
	return values(got), nil
}

// take is the batch read ahead for step and names, if that is the one.
func (d *DataSource) take(step int, names map[string]bool) *prefetch {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.next
	d.next = nil
	if p == nil || p.step != step || !maps.Equal(p.names, names) {
		return nil
	}
	return p
}

// ahead starts reading step's batch.
func (d *DataSource) ahead(step int, names map[string]bool) {
	p := &prefetch{step: step, names: maps.Clone(names), done: make(chan struct{})}
	d.mu.Lock()
	d.next = p
	d.mu.Unlock()
	go func() {
		defer close(p.done)
		p.got, p.err = d.Set.Read(p.names, d.Order.Rows(step))
	}()
}

// EvalData is an evaluation set in file order, in batches (stage.EvalSource).
type EvalData struct {
	Set  *dataset.Set
	Size int // samples per batch
}

// Batches is how many batches the set makes.
func (e *EvalData) Batches() int { return dataset.EvalBatches(e.Set.N, e.Size) }

// Batch is batch k of the named inputs.
func (e *EvalData) Batch(k int, names map[string]bool) (map[string]*stage.Value[float32], error) {
	got, err := e.Set.Read(names, dataset.EvalRows(e.Set.N, e.Size, k))
	if err != nil {
		return nil, err
	}
	return values(got), nil
}

func values(named map[string]tensor.Named) map[string]*stage.Value[float32] {
	out := make(map[string]*stage.Value[float32], len(named))
	for name, t := range named {
		out[name] = &stage.Value[float32]{Shape: t.Shape, Data: t.F32, Ints: t.I32}
	}
	return out
}
