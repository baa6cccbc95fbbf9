package runtime

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/search"
	"github.com/graphpipe/graphpipe/stage"
)

// dropNet has batch_norm and dropout in a chain of linear layers: what a
// recomputed forward must draw and normalise exactly as the first did.
const dropNet = `{"format":"graphpipe/model@2","batch_size":16,"seed":5,
 "inputs":[{"name":"x","shape":[8],"dtype":"float32"},{"name":"label","shape":[],"dtype":"int32","range":[0,4]}],
 "ops":[
  {"name":"l1","op":"linear","inputs":["x"],"attrs":{"out":16}},
  {"name":"bn","op":"batch_norm","inputs":["l1"]},
  {"name":"r1","op":"relu","inputs":["bn"]},
  {"name":"d1","op":"dropout","inputs":["r1"],"attrs":{"p":0.2}},
  {"name":"l2","op":"linear","inputs":["d1"],"attrs":{"out":16}},
  {"name":"g2","op":"gelu","inputs":["l2"]},
  {"name":"d2","op":"dropout","inputs":["g2"],"attrs":{"p":0.1}},
  {"name":"l3","op":"linear","inputs":["d2"],"attrs":{"out":16}},
  {"name":"t3","op":"tanh","inputs":["l3"]},
  {"name":"l4","op":"linear","inputs":["t3"],"attrs":{"out":4}},
  {"name":"loss","op":"softmax_cross_entropy","inputs":["l4","label"]}]}`

// TestRecomputeRunIsBitIdentical: a pipeline run whose plan makes every
// stage recompute its forward during backward ends with the parameters
// and buffers of the same plan keeping its activations, bit for bit, and
// the same losses; 1F1B and GPipe, 3 steps with Adam.
func TestRecomputeRunIsBitIdentical(t *testing.T) {
	g, err := dag.Load([]byte(dropNet))
	if err != nil {
		t.Fatal(err)
	}
	for _, sched := range []string{"1f1b", "gpipe"} {
		t.Run(sched, func(t *testing.T) {
			keep, err := search.Search(g, search.Options{Device: plan.Profiles["cpu"], Devices: 3, MicroBatch: 4, Strategy: "spp", Schedule: sched, Recompute: "off"})
			if err != nil {
				t.Fatal(err)
			}
			if len(keep.Stages) < 2 {
				t.Fatalf("a plan of %d stage(s): no pipeline to test", len(keep.Stages))
			}
			rec, err := plan.DecodePlan(keep.Encode())
			if err != nil {
				t.Fatal(err)
			}
			for i := range rec.Stages {
				rec.Stages[i].Recompute = true
			}
			back, err := plan.DecodePlan(rec.Encode())
			if err != nil || !back.Recomputes() {
				t.Fatalf("the plan file lost its stages' recompute: %v", err)
			}
			o := Options{Train: stage.TrainOptions{Optimizer: "adam", LR: 1e-2}}
			for id := range back.Stages { // the workers' executors are told
				ep, err := wire.NewEndpoint(wire.NewMemory(1, wire.Faults{}, 1<<20), "check", 1, int32(id))
				if err != nil {
					t.Fatal(err)
				}
				w, err := NewWorker(&Job{Graph: g, Plan: back, Options: o}, id, ep)
				if err != nil {
					t.Fatal(err)
				}
				if !w.ex.Recompute {
					t.Fatalf("stage %d's executor keeps its activations", id)
				}
				w.Close()
				ep.Close()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			a, err := RunLocal(ctx, &Job{Run: "keep", Graph: g, Plan: keep, Steps: 3, Options: o}, wire.NewMemory(1, wire.Faults{}, 1<<20))
			if err != nil {
				t.Fatal(err)
			}
			b, err := RunLocal(ctx, &Job{Run: "recompute", Graph: g, Plan: back, Steps: 3, Options: o}, wire.NewMemory(1, wire.Faults{}, 1<<20))
			if err != nil {
				t.Fatal(err)
			}
			if len(a.Params) != len(b.Params) || len(a.Params) == 0 {
				t.Fatalf("%d parameters recomputing, %d keeping", len(b.Params), len(a.Params))
			}
			for name, w := range a.Params {
				for i := range w.Data {
					if math.Float32bits(b.Params[name].Data[i]) != math.Float32bits(w.Data[i]) {
						t.Fatalf("%s[%d]: %v recomputing, %v keeping", name, i, b.Params[name].Data[i], w.Data[i])
					}
				}
			}
			for i := range a.Losses {
				if a.Losses[i] != b.Losses[i] {
					t.Fatalf("loss %d: %v recomputing, %v keeping", i, b.Losses[i], a.Losses[i])
				}
			}
			t.Logf("%d stages, %d parameters and buffers equal bit for bit; losses %v", len(keep.Stages), len(a.Params), a.Losses)
		})
	}
}
