package plan

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/models"
)

// caseStudy is the small case-study model and a plan search wrote for it
// (cpu, 4 devices, micro-batches of 4), as stored in testdata/plans.
func caseStudy(t testing.TB) (*dag.Graph, []byte) {
	t.Helper()
	e, _ := models.Lookup("case-study")
	g, err := e.Build(e.Small)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("testdata/plans/case-study-gpp-4cpu.json")
	if err != nil {
		t.Fatal(err)
	}
	return g, data
}

// TestHandEditedPlans: each edit a person might make to a plan file by hand
// is refused at load with a PlanError naming the stage and the field; the
// edits only the model can catch are refused once the model is given.
func TestHandEditedPlans(t *testing.T) {
	g, data := caseStudy(t)
	good, err := LoadPlan(data, g)
	if err != nil {
		t.Fatalf("the stored plan does not load: %v", err)
	}
	// many is a stage with at least two ops; an edge into it
	many, in := -1, -1
	for s := len(good.Stages) - 1; s > 0 && in < 0; s-- {
		many, in = s, slices.IndexFunc(good.Edges, func(e PlanEdge) bool { return e.To == s })
		if len(good.Stages[s].Ops) < 2 {
			in = -1
		}
	}
	if in < 0 {
		t.Fatalf("the plan has no stage of two ops with an edge into it:\n%s", data)
	}
	for _, tc := range []struct {
		name      string
		edit      func(p *Plan)
		needModel bool // only a check against the model catches it
		stage     int
		field     string
		want      string
	}{
		{"op twice", func(p *Plan) { p.Stages[many].Ops = append(p.Stages[many].Ops, p.Stages[0].Ops[0]) }, false, many, "ops", "is also in stage 0"},
		{"op missing", func(p *Plan) { p.Stages[many].Ops = p.Stages[many].Ops[1:] }, false, -1, "stages", "an op is missing or extra"},
		{"op missing, with the model", func(p *Plan) { p.Stages[many].Ops = p.Stages[many].Ops[1:] }, true, -1, "stages", "of the model is in no stage"},
		{"unknown op", func(p *Plan) { p.Stages[many].Ops[0] = "no-such-op" }, true, many, "ops", `op "no-such-op" is not an op of model`},
		{"unknown schedule", func(p *Plan) { p.Schedule = "weird" }, false, -1, "schedule", `unknown schedule "weird"`},
		{"in_flight -1", func(p *Plan) { p.Stages[0].InFlight = -1 }, false, 0, "in_flight", "got -1"},
		{"10^9 devices", func(p *Plan) { p.Devices = 1e9 }, false, -1, "devices", "must be between 1 and 4096"},
		{"device 10^9", func(p *Plan) { p.Stages[1].Devices = []int{1e9} }, false, 1, "devices", "not one of the plan's 4"},
		{"shared device", func(p *Plan) { p.Stages[1].Devices = p.Stages[0].Devices }, false, 1, "devices", "also stage 0's"},
		{"wrong device_micro_batch", func(p *Plan) { p.Stages[0].MicroBatch = 3 }, false, 0, "device_micro_batch", "is 3, but a micro-batch of 4"},
		// ceilDiv once added the devices before dividing: at a micro-batch
		// near 2^63 it overflowed, wanted a negative per-device micro-batch
		// and accepted one (the workers then panicked)
		{"device_micro_batch at 2^63", func(p *Plan) {
			p.BatchSize, p.MicroBatch, p.MicroBatches = math.MaxInt64, math.MaxInt64, 1
			p.Devices++
			p.Stages[0].Devices = append(p.Stages[0].Devices[:1], p.Devices-1)
			p.Stages[0].MicroBatch = -1 << 62
		}, false, 0, "device_micro_batch", "is 4611686018427387904 per device"},
		{"negative forward_s", func(p *Plan) { p.Stages[0].ForwardS = -1 }, false, 0, "forward_s", "not negative, got -1"},
		{"negative stash", func(p *Plan) { p.Stages[0].StashBytes = -5 }, false, 0, "stash_bytes_per_micro_batch", "got -5"},
		{"negative transfer", func(p *Plan) { p.Edges[0].Transfer = -1e-3 }, false, -1, "edges[0].transfer_s", "got -0.001"},
		{"edge twice", func(p *Plan) { p.Edges = append(p.Edges, p.Edges[0]) }, false, -1, "edges[" + itoa(len(good.Edges)) + "]", "is also edges[0]"},
		{"id", func(p *Plan) { p.Stages[1].ID = 7 }, false, 1, "id", "is 7"},
		{"tensor not carried", func(p *Plan) { p.Edges[in].Tensors = []string{p.Stages[p.Edges[in].From].Ops[0]} }, true, many, "edges", "no edge brings it"},
		{"tensor from nowhere", func(p *Plan) { p.Edges[in].Tensors = append(p.Edges[in].Tensors, p.Stages[many].Ops[0]) }, true, -1, "edges[" + itoa(in) + "].tensors", "neither computes nor receives"},
		{"edge tensor unknown", func(p *Plan) { p.Edges[in].Tensors = append(p.Edges[in].Tensors, "ghost") }, true, -1, "edges[" + itoa(in) + "].tensors", `"ghost" is not an op`},
		{"another model", func(p *Plan) { p.Model.SHA256 = strings.Repeat("0", 64) }, true, -1, "model.sha256", "made for another model"},
		{"unknown placement", func(p *Plan) { p.Stages[0].OptimizerState = "zero3" }, false, 0, "optimizer_state", `unknown placement "zero3"`},
		{"sharded on one device", func(p *Plan) { p.Stages[0].OptimizerState, p.Stages[0].Devices = StateSharded, p.Stages[0].Devices[:1] }, false, 0, "optimizer_state", "sharded over 1 device"},
		{"streamed on the device", func(p *Plan) { p.Stages[0].StreamWeights = true }, false, 0, "stream_weights", `must be "host", got "replicated"`},
		{"negative host copies", func(p *Plan) { p.Stages[0].OptimizerState, p.Stages[0].HostCopyBytes = StateHost, -8 }, false, 0, "host_copy_bytes", "got -8"},
		{"a late all-gather on a replicated stage", func(p *Plan) { p.Stages[0].GatherS = 1e-3 }, false, 0, "gather_s", `only a stage whose optimizer_state is "sharded"`},
		{"negative gather_s", func(p *Plan) { p.Stages[0].GatherS = -1 }, false, 0, "gather_s", "got -1"},
		{"late all-gather buckets on a replicated stage", func(p *Plan) { p.Stages[0].GatherBucketBytes = 1 << 20 }, false, 0, "gather_bucket_bytes", `only a stage whose optimizer_state is "sharded"`},
		{"negative gather_bucket_bytes", func(p *Plan) { p.Stages[0].GatherBucketBytes = -1 }, false, 0, "gather_bucket_bytes", "got -1"},
		{"byte-sized all-reduce buckets", func(p *Plan) { p.Stages[0].Params, p.Stages[0].BucketBytes = 1e6, 4 }, false, 0, "allreduce_bucket_bytes", "more than 4096 buckets"},
		{"byte-sized buckets, params understated", func(p *Plan) { p.Stages[0].Params, p.Stages[0].BucketBytes = 1, 4 }, true, 0, "allreduce_bucket_bytes", "more than 4096 buckets"},
		{"byte-sized gather buckets", func(p *Plan) {
			p.Stages[0].Params, p.Stages[0].OptimizerState, p.Stages[0].GatherBucketBytes = 1e6, StateSharded, 64
		}, false, 0, "gather_bucket_bytes", "more than 4096 buckets"},
		{"buckets with the state on the host", func(p *Plan) { p.Stages[0].OptimizerState, p.Stages[0].BucketBytes = StateHost, 1<<20 }, false, 0, "allreduce_bucket_bytes", "cannot overlap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p Plan
			if err := json.Unmarshal(data, &p); err != nil {
				t.Fatal(err)
			}
			tc.edit(&p)
			bad, _ := json.Marshal(&p)
			_, err := DecodePlan(bad)
			if tc.needModel {
				if err != nil && !strings.Contains(tc.name, "with the model") {
					t.Fatalf("refused without the model: %v", err)
				}
				_, err = LoadPlan(bad, g)
			}
			var pe *PlanError
			if !errors.As(err, &pe) || pe.Stage != tc.stage || pe.Field != tc.field || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v (%#v), want stage %d, field %s, %q", err, pe, tc.stage, tc.field, tc.want)
			}
		})
	}
}

// TestCheckModelHash: the one check of a plan against a model passes the
// plan's own model and refuses another with a *ModelMismatchError naming
// the op and both hashes; LoadPlan's PlanError (model.sha256) carries it.
func TestCheckModelHash(t *testing.T) {
	g, data := caseStudy(t)
	p, err := DecodePlan(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckModelHash("job", g); err != nil {
		t.Fatalf("its own model: %v", err)
	}
	e, _ := models.Lookup("mlp")
	other, _ := e.Build(e.Small)
	err = p.CheckModelHash("job", other)
	var mm *ModelMismatchError
	if !errors.As(err, &mm) || mm.Op != "job" || mm.PlanHash != p.Model.SHA256 || mm.ModelHash != dag.ModelHash(other) {
		t.Fatalf("another model: got %v (%#v)", err, mm)
	}
	want := "job: made for another model (the plan says hash " + p.Model.SHA256[:12] + ", this model's is " + dag.ModelHash(other)[:12] + ")"
	if err.Error() != want {
		t.Errorf("got %q, want %q", err, want)
	}
	_, err = LoadPlan(data, other)
	var pe *PlanError
	if !errors.As(err, &pe) || pe.Field != "model.sha256" || !errors.As(err, &mm) || mm.Op != "plan" {
		t.Errorf("LoadPlan: got %v, want a PlanError on model.sha256 carrying the mismatch", err)
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// TestStoredPlans: the plan files kept as fuzz seeds decode.
func TestStoredPlans(t *testing.T) {
	files, _ := filepath.Glob("testdata/plans/*.json")
	for _, file := range files {
		data, _ := os.ReadFile(file)
		if _, err := DecodePlan(data); err != nil {
			t.Errorf("%s: %v", file, err)
		}
	}
	if len(files) < 4 {
		t.Fatalf("%d plan files", len(files))
	}
}
