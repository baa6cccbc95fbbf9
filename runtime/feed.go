package runtime

import (
	"fmt"
	"os"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/dataset"
	"github.com/graphpipe/graphpipe/stage"
)

// feed is what a worker's stage reads of the run's data: the model inputs
// its ops read, from the training batches and the evaluation set, and the
// files it keeps open for them. Only the worker's goroutine uses it.
type feed struct {
	spec  *DataSpec
	reads map[string]bool  // the model inputs this stage's ops read
	data  stage.Source     // the training batches
	eval  stage.EvalSource // the evaluation set, when the stage reads model inputs
	sets  []interface{ Close() error }
	// evalRows is, while evaluating, the rows of the micro-batch at hand
	// (an evaluation's last batch may be partial); -1 while training.
	evalRows int
}

// open opens what the stage reads, for worker id, batch samples a batch:
// the synthetic data, or the run's dataset and evaluation set on this
// host, checked against the model and against the coordinator's
// fingerprints. A stage that reads no model input opens nothing.
func (f *feed) open(g *dag.Graph, id int32, batch int) error {
	spec := f.spec
	if spec == nil || spec.Path == "" {
		ds, err := stage.NewDataset(g)
		f.data = ds
		if err != nil || spec == nil || spec.EvalPath == "" {
			return err
		}
	}
	if len(f.reads) == 0 {
		return nil
	}
	host, _ := os.Hostname()
	open := func(flag, path, want string) (*dataset.Set, error) {
		set, err := OpenData(path, g, spec.AllowNonfinite)
		if err != nil {
			return nil, &DataError{fmt.Sprintf("worker %d on %s: %s %v", id, host, flag, err)}
		}
		f.sets = append(f.sets, set)
		got, err := set.Fingerprint()
		if err != nil {
			return nil, &DataError{fmt.Sprintf("worker %d on %s: %s %v", id, host, flag, err)}
		}
		if want != "" && got != want {
			return nil, &DataError{fmt.Sprintf("worker %d on %s: %s %s holds other data than the coordinator's (fingerprint %.12s, the coordinator's %.12s): every host needs the same files", id, host, flag, path, got, want)}
		}
		return set, nil
	}
	if spec.Path != "" {
		set, err := open("--data", spec.Path, spec.Fingerprint)
		if err != nil {
			return err
		}
		if f.data, err = NewDataSource(set, batch, g.Seed(), spec.Shuffle); err != nil {
			return dataErr(err)
		}
	}
	if spec.EvalPath != "" {
		set, err := open("--eval-data", spec.EvalPath, spec.EvalFingerprint)
		if err != nil {
			return err
		}
		f.eval = &EvalData{Set: set, Size: batch}
	}
	return nil
}

// prefetch has the synthetic data make the next batch while this one
// trains (a GPU's host idles; a CPU stage waits on its peers); a user's
// DataSource reads ahead on its own.
func (f *feed) prefetch() {
	if ds, ok := f.data.(*stage.Dataset); ok {
		f.data = stage.NewPrefetcher(ds)
	}
}

// batch is iteration n's batch of size samples, the model inputs the
// stage reads (none when it reads none).
func (f *feed) batch(n, size int) (map[string]*stage.Value[float32], error) {
	if len(f.reads) == 0 {
		return nil, nil
	}
	b, err := f.data.Inputs(n, size, f.reads)
	if err != nil {
		return nil, dataErr(err)
	}
	return b, nil
}

// close waits for a batch in the making and lets go of the data files.
func (f *feed) close() {
	if p, ok := f.data.(*stage.Prefetcher); ok {
		p.Wait()
	}
	for _, s := range f.sets {
		s.Close()
	}
	f.sets = nil
}
