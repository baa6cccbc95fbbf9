package search

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/plan"
)

// TestTwoBWAtLeastOneFOneB: the paper's three multi-branch models on 32
// v100 at 16 samples a device plan at least as fast with 2bw as with 1f1b
// (no fill or drain to pay), every 2bw stage within memory with its
// second weight version, no stage more than a batch ahead; auto-async
// keeps the faster, and says what the other predicted (on candle-uno).
func TestTwoBWAtLeastOneFOneB(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"mmt", "dlrm", "candle-uno"} {
		g := zooModel(t, name)
		o := Options{Device: plan.Profiles["v100"], Devices: 32, Batch: 512}
		o.Schedule = "1f1b"
		one, err := Search(g, o)
		if err != nil {
			t.Fatal(err)
		}
		o.Schedule = "2bw"
		two, err := Search(g, o)
		if err != nil {
			t.Fatal(err)
		}
		if two.Predicted.SamplesPerS < one.Predicted.SamplesPerS || !two.Predicted.Feasible {
			t.Errorf("%s: 2bw %.4g samples/s, 1f1b %.4g", name, two.Predicted.SamplesPerS, one.Predicted.SamplesPerS)
		}
		if tooStale(two) || two.Schedule != "2bw" {
			t.Errorf("%s: the 2bw plan (%s) runs a stage more than a batch ahead", name, two.Schedule)
		}
		if _, err := plan.DecodePlan(two.Encode()); err != nil {
			t.Errorf("%s: the 2bw plan does not load: %v", name, err)
		}
		if name == "candle-uno" { // a third and fourth search: on the smallest model only
			o.Schedule = AutoAsync
			auto, err := Search(g, o)
			if err != nil {
				t.Fatal(err)
			}
			if notes := strings.Join(auto.Search.Notes, "\n"); auto.Schedule != "2bw" || auto.Predicted.SamplesPerS != two.Predicted.SamplesPerS || !strings.Contains(notes, "1f1b ") {
				t.Errorf("%s: auto-async kept %s at %.4g samples/s, notes %q", name, auto.Schedule, auto.Predicted.SamplesPerS, notes)
			}
		}
		t.Logf("%s: 2bw %.4g samples/s (%.3g GB), 1f1b %.4g (%.3g GB)", name, two.Predicted.SamplesPerS, float64(two.Predicted.PeakMemory)/1e9,
			one.Predicted.SamplesPerS, float64(one.Predicted.PeakMemory)/1e9)
	}
}

// TestTwoBWPricesTheSecondVersion: under 2bw a stage holds a second
// version of its weights (a float32 copy, and its bf16 copy in bf16) on
// top of 1f1b's static bytes, whatever the placement of its optimizer
// state, and its step copies the newest into it.
func TestTwoBWPricesTheSecondVersion(t *testing.T) {
	t.Parallel()
	g := zooModel(t, "mlp")
	for _, prec := range []string{"fp32", "bf16"} {
		models := map[string]*costModel{}
		for _, s := range []string{"1f1b", "2bw"} {
			o, err := Options{Device: plan.Profiles["h100"], Devices: 4, Schedule: s, Precision: prec}.withDefaults(g.BatchSize())
			if err != nil {
				t.Fatal(err)
			}
			models[s] = newCostModel(g, &o)
		}
		one, two := models["1f1b"], models["2bw"]
		const params = 1000
		want := int64(params) * (4 + one.copyB)
		if d := two.static(params) - one.static(params); d != want {
			t.Errorf("%s: replicated, %d more bytes, want %d", prec, d, want)
		}
		blk := &block{params: params}
		for _, pl := range []placement{placeSharded, placeHost} {
			if d := two.placedStatic(pl, blk, 2) - one.placedStatic(pl, blk, 2); d != want {
				t.Errorf("%s: placement %v, %d more bytes, want %d", prec, pl, d, want)
			}
		}
		for _, pl := range []placement{placeReplicated, placeSharded, placeHost} {
			d := two.placedFlush(pl, params, 2, 0, 1) - one.placedFlush(pl, params, 2, 0, 1)
			if want := params * 8 / two.dev.MemBW; math.Abs(d-want) > 1e-9*want {
				t.Errorf("%s: placement %v: the step copies %g s more, want %g (all the weights, on every replica)", prec, pl, d, want)
			}
		}
	}
}

// TestTwoBWLeavesOutTooStale: with one micro-batch a batch no stage may
// run a forward ahead of its update past one micro-batch, so a 2bw search
// keeps pipelines of depth 2 at most, and says it left deeper ones out;
// the synchronous default is untouched.
func TestTwoBWLeavesOutTooStale(t *testing.T) {
	t.Parallel()
	g := zooModel(t, "transformer")
	o := Options{Device: plan.Profiles["v100"], Devices: 8, Batch: 8, MicroBatch: 8, Schedule: "2bw"}
	p, err := Search(g, o)
	if err != nil {
		t.Fatal(err)
	}
	if p.Predicted.Depth > 2 || tooStale(p) {
		t.Errorf("depth %d with %d micro-batch(es) a batch", p.Predicted.Depth, p.MicroBatches)
	}
	if !strings.Contains(strings.Join(p.Search.Notes, "\n"), "left out") {
		t.Errorf("no note of the plans left out: %q", p.Search.Notes)
	}
	o.Schedule = ""
	sync, err := Search(g, o)
	if err != nil {
		t.Fatal(err)
	}
	if k, _ := microbatch.KindOf(sync.Schedule); k.NoFlush {
		t.Errorf("the default schedule %s has no flush", sync.Schedule)
	}
}

// TestNoFlushOnlyWhereItTrains: a plan the run would refuse to train
// without a flush is none: 2bw is refused, naming the schedule and why, and
// auto-async weighs 1f1b alone and says why, for a model with buffers
// (batch_norm), for selective backprop, and for a run's own reason. Before,
// search --schedule 2bw planned them all, and run --schedule auto-async
// chose 2bw and then refused its own plan (exit 2).
func TestNoFlushOnlyWhereItTrains(t *testing.T) {
	t.Parallel()
	bn, err := dag.Load([]byte(`{"format":"graphpipe/model@2","batch_size":32,"seed":1,
 "inputs":[{"name":"x","shape":[16],"dtype":"float32"},{"name":"label","shape":[],"dtype":"int32","range":[0,4]}],
 "ops":[{"name":"fc","op":"linear","inputs":["x"],"attrs":{"out":64}},{"name":"bn","op":"batch_norm","inputs":["fc"]},
  {"name":"act","op":"relu","inputs":["bn"]},{"name":"fc2","op":"linear","inputs":["act"],"attrs":{"out":64}},
  {"name":"head","op":"linear","inputs":["fc2"],"attrs":{"out":4}},{"name":"loss","op":"softmax_cross_entropy","inputs":["head","label"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	mlp := zooModel(t, "mlp")
	base := Options{Device: plan.Profiles["v100"], Devices: 4}
	for _, tc := range []struct {
		name string
		g    *dag.Graph
		edit func(o *Options)
		want string
	}{
		{"buffers", bn, func(*Options) {}, `op "bn" keeps buffers (bn.running_mean)`},
		{"selective backprop", mlp, func(o *Options) { o.BackpropFraction = 0.5 }, "--selective-backprop keeps samples"},
		{"the run's reason", mlp, func(o *Options) { o.FlushOnly = "backend cuda keeps one version" }, "backend cuda keeps one version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			tc.edit(&o)
			o.Schedule = "2bw"
			var oe *OptionError
			if _, err := Search(tc.g, o); !errors.As(err, &oe) || oe.Flag != "schedule" || !strings.Contains(oe.Msg, tc.want) {
				t.Errorf("2bw: got %v, want --schedule refused: %s", err, tc.want)
			}
			o.Schedule = AutoAsync
			p, err := Search(tc.g, o)
			if err != nil {
				t.Fatal(err)
			}
			if notes := strings.Join(p.Search.Notes, "\n"); p.Schedule != "1f1b" || !strings.Contains(notes, "2bw not weighed: "+tc.want) {
				t.Errorf("auto-async: schedule %s, notes %q; want 1f1b, 2bw not weighed: %s", p.Schedule, notes, tc.want)
			}
		})
	}
}
