package runtime

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/dataset"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor"
)

// writeData writes n samples of g's synthetic data (one synthetic step of
// n, drawn at step) as a safetensors file and returns its path.
func writeData(t *testing.T, g *dag.Graph, n, step int) string {
	t.Helper()
	ds, err := stage.NewDataset(g)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ds.Batch(step, n)
	if err != nil {
		t.Fatal(err)
	}
	var entries []tensor.Named
	for name, v := range b {
		entries = append(entries, tensor.Named{Name: name, Shape: v.Shape, F32: v.Data, I32: v.Ints})
	}
	data, err := tensor.EncodeSafetensors(entries, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "data.safetensors")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// dataReference trains g in one process on the data at path in the same
// order and evaluates it as spec says.
func dataReference(t *testing.T, g *dag.Graph, plan *plan.Plan, spec *DataSpec, steps int, o stage.TrainOptions) (*stage.Trainer, []float64, []stage.EvalResult) {
	t.Helper()
	o.MicroBatch = int(plan.MicroBatch)
	tr, err := stage.NewTrainer(g, o)
	if err != nil {
		t.Fatal(err)
	}
	set, err := OpenData(spec.Path, g, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	if tr.Source, err = NewDataSource(set, int(plan.BatchSize), g.Seed(), spec.Shuffle); err != nil {
		t.Fatal(err)
	}
	eval, err := OpenData(spec.EvalPath, g, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eval.Close() })
	var losses []float64
	var evals []stage.EvalResult
	for s := 0; s < steps; s++ {
		l, _, err := tr.Step(s)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, l)
		if spec.EvalDue(s, steps) {
			r, err := tr.Evaluate(s+1, &EvalData{Set: eval, Size: int(plan.BatchSize)})
			if err != nil {
				t.Fatal(err)
			}
			evals = append(evals, r)
		}
	}
	return tr, losses, evals
}

// TestDataPipelineEqualsTrain: a pipeline (replicated stages among them)
// over a lossy transport trains on a dataset, across epoch boundaries and
// evaluating on a set whose last batch is partial, exactly as one process
// does: the same parameters, losses and evaluations.
func TestDataPipelineEqualsTrain(t *testing.T) {
	for _, tc := range []struct {
		model        string
		devices      int
		micro        int64
		wantReplicas bool
		opt          stage.TrainOptions
	}{
		{"mmt", 4, 4, false, stage.TrainOptions{Optimizer: "adam", LR: 3e-3}},
		{"mlp", 6, 8, true, stage.TrainOptions{Optimizer: "sgd", LR: 0.05, Momentum: 0.9}},
	} {
		t.Run(tc.model, func(t *testing.T) {
			g, plan := smallPlan(t, tc.model, tc.devices, tc.micro)
			if got := layout(plan).total > len(plan.Stages); got != tc.wantReplicas {
				t.Fatalf("replicated stages: %v, want %v", got, tc.wantReplicas)
			}
			B := int(plan.BatchSize)
			spec := &DataSpec{Path: writeData(t, g, 3*B+B/2, 11), EvalPath: writeData(t, g, 2*B+B/2+1, 12), Shuffle: true, EvalEvery: 3}
			set, _ := dataset.Open(spec.EvalPath)
			spec.EvalSamples = set.N
			set.Close()
			steps := 7 // epochs of 3 steps
			o := Options{Train: tc.opt, Data: spec}
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			res, err := RunLocal(ctx, &Job{Run: "data", Graph: g, Plan: plan, Steps: steps, Options: o}, wire.NewMemory(5, wire.Faults{Drop: 0.03, Duplicate: 0.03, Reorder: 0.03}, 1<<20))
			if err != nil {
				t.Fatal(err)
			}
			tr, losses, evals := dataReference(t, g, plan, spec, steps, tc.opt)
			equalParams(t, res.Params, tr.Ex.Params, 1e-5)
			for s := range losses {
				if math.Abs(res.Losses[s]-losses[s]) > 1e-5*math.Abs(losses[s]) {
					t.Errorf("step %d: loss %v, one process %v", s, res.Losses[s], losses[s])
				}
			}
			if len(res.Evals) != 3 || len(evals) != 3 {
				t.Fatalf("%d and %d evaluations, want 3 (after steps 3, 6, 7)", len(res.Evals), len(evals))
			}
			for i, r := range res.Evals {
				w := evals[i]
				if r.Step != w.Step || r.Samples != spec.EvalSamples || math.Abs(r.Loss-w.Loss) > 1e-5*math.Abs(w.Loss) || (r.HasAccuracy() != w.HasAccuracy()) || r.HasAccuracy() && r.Accuracy != w.Accuracy {
					t.Errorf("evaluation %d: %+v, one process %+v", i, r, w)
				}
			}
			t.Logf("%d stages on %d workers; evaluations %+v", len(plan.Stages), layout(plan).total, res.Evals)
		})
	}
}

// TestWorkerRefusesOtherData: a worker whose files differ from the
// coordinator's (its fingerprint) refuses to start, naming itself and the
// flag, as a DataError; a worker whose stage reads no model input opens
// no file at all.
func TestWorkerRefusesOtherData(t *testing.T) {
	g, plan := smallPlan(t, "mlp", 6, 8) // four stages: the first reads x, the last the label
	path := writeData(t, g, 40, 1)
	o := Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.1}, Data: &DataSpec{Path: path, Fingerprint: strings.Repeat("0", 64)}}
	readers := 0
	for id := 0; id < layout(plan).total; id++ {
		ep, err := wire.NewEndpoint(wire.NewMemory(1, wire.Faults{}, 1<<20), "fp", 1, int32(id))
		if err != nil {
			t.Fatal(err)
		}
		defer ep.Close()
		st, _ := layout(plan).where(id)
		reads := false
		for _, name := range plan.Stages[st].Ops {
			i, _ := g.OpIndex(name)
			for _, in := range g.OpInputs(i) {
				reads = reads || in.Producer < 0
			}
		}
		w, err := NewWorker(&Job{Graph: g, Plan: plan, Options: o}, id, ep)
		if !reads {
			if err != nil || len(w.feed.sets) != 0 {
				t.Fatalf("worker %d reads no input, yet: %v, %d files open", id, err, len(w.feed.sets))
			}
			continue
		}
		readers++
		want := fmt.Sprintf("worker %d on ", id)
		if err == nil || !IsDataError(err) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--data "+path+" holds other data than the coordinator's") {
			t.Fatalf("worker %d: got %v", id, err)
		}
	}
	if readers == 0 || readers == layout(plan).total {
		t.Fatalf("%d of %d workers read model inputs: the test needs both kinds", readers, layout(plan).total)
	}
}

// TestChangedDataIsNotTheUsers: a data file that changed under the run
// (cut or replaced while mapped) is the environment's fault, exit 1 and a
// restart's to mend, not a refusal of the data (exit 2, no restart); a
// row the data got wrong is the user's.
func TestChangedDataIsNotTheUsers(t *testing.T) {
	changed := &dataset.Error{Path: "d.safetensors", Tensor: "x", Row: 3, Msg: "the file changed while in use", Changed: true}
	bad := &dataset.Error{Path: "d.safetensors", Tensor: "x", Row: 3, Msg: "NaN"}
	if IsDataError(changed) || IsDataError(dataErr(changed)) {
		t.Error("a changed file is taken for bad data")
	}
	if !IsDataError(bad) || !IsDataError(dataErr(bad)) {
		t.Error("bad data is not taken for bad data")
	}
	if !strings.Contains(dataErr(changed).Error(), `d.safetensors: tensor "x"`) {
		t.Errorf("%v does not name the file and the tensor", dataErr(changed))
	}
}
