package supervise

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor"
)

// dumpRun writes what graphpipe train --dump writes: initial parameters and
// data (both reproducible from the model's seed), and the workers' final
// parameters and the losses.
func dumpRun(dir string, g *dag.Graph, plan *plan.Plan, res *runtime.Result, steps int, init map[string]*stage.Value[float32], src stage.Source) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return &OutputError{Op: "mkdir", Field: "Dump", Path: dir, Err: err}
	}
	all := make([]int, g.NumOps())
	for i := range all {
		all[i] = i
	}
	ex, err := stage.NewExecutor(g, all, g.Seed())
	if err != nil {
		return err
	}
	if init != nil {
		ex.LoadState(init)
	}
	if err := WriteParams(filepath.Join(dir, "init.safetensors"), ex); err != nil {
		return err
	}
	if src == nil {
		ds, err := stage.NewDataset(g)
		if err != nil {
			return err
		}
		src = ds
	}
	var data []tensor.Named
	for s := 0; s < steps; s++ {
		batch, err := src.Inputs(s, int(plan.BatchSize), nil)
		if err != nil {
			return err
		}
		for name, v := range batch {
			data = append(data, tensor.Named{Name: fmt.Sprintf("%d/%s", s, name), Shape: v.Shape, F32: v.Data, I32: v.Ints})
		}
	}
	state := ex.State()
	for name, v := range res.Params {
		copy(state[name].Data, v.Data)
	}
	return WriteDump(dir, ex, data, res.Losses)
}

// WriteParams writes the executor's parameters and buffers by name,
// brought to the host (HostState).
func WriteParams(path string, ex *stage.Executor) error {
	var entries []tensor.Named
	state, err := ex.HostState()
	if err != nil {
		return err
	}
	for _, name := range append(ex.ParamNames(), ex.BufferNames()...) {
		v := state[name]
		entries = append(entries, tensor.Named{Name: name, Shape: v.Shape, F32: append([]float32(nil), v.Data...)})
	}
	b, err := tensor.EncodeSafetensors(entries, nil)
	if err != nil {
		return err
	}
	return WriteFileAtomic(path, b)
}

// WriteDump writes a dump's data, final parameters and losses into dir
// (graphpipe train --dump and run --dump alike).
func WriteDump(dir string, ex *stage.Executor, data []tensor.Named, losses []float64) error {
	b, err := tensor.EncodeSafetensors(data, nil)
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(filepath.Join(dir, "data.safetensors"), b); err != nil {
		return err
	}
	if err := WriteParams(filepath.Join(dir, "final.safetensors"), ex); err != nil {
		return err
	}
	l, _ := json.MarshalIndent(jsonLosses(losses), "", " ")
	return WriteFileAtomic(filepath.Join(dir, "losses.json"), append(l, '\n'))
}

// jsonLosses encodes a loss that is not finite as null.
func jsonLosses(losses []float64) []*float64 {
	out := make([]*float64, len(losses))
	for i, v := range losses {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			out[i] = &losses[i]
		}
	}
	return out
}
