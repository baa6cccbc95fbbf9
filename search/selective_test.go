package search

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
)

// TestSelectivePriced: a plan priced for selective backprop at a third of
// the samples records the fraction, prices every op's backward passes at
// a third of the full backward's and its forward whole, each edge's
// gradients below its activations, keeps the loss's stage on one device,
// and predicts a shorter iteration than the full plan; the simulator
// reads the gradient transfers from the plan file.
func TestSelectivePriced(t *testing.T) {
	t.Parallel()
	g := zooModel(t, "candle-uno")
	o := Options{Device: plan.Profiles["v100"], Devices: 8, MicroBatch: 64, Strategy: "spp", Recompute: "off"}
	full, err := Search(g, o)
	if err != nil {
		t.Fatal(err)
	}
	o.BackpropFraction = 1.0 / 3
	sb, err := Search(g, o)
	if err != nil {
		t.Fatal(err)
	}
	if sb.BackpropFraction != o.BackpropFraction || full.BackpropFraction != 0 {
		t.Fatalf("backprop fractions %v and %v", sb.BackpropFraction, full.BackpropFraction)
	}
	if !(sb.Predicted.IterationS < full.Predicted.IterationS) {
		t.Errorf("selective backprop predicted %.4g s an iteration, the full backward %.4g", sb.Predicted.IterationS, full.Predicted.IterationS)
	}
	loss := g.Op(g.Loss()).Name
	for _, s := range sb.Stages {
		if slices.Contains(s.Ops, loss) && len(s.Devices) != 1 {
			t.Errorf("the loss's stage runs on %d devices", len(s.Devices))
		}
	}
	fo, err := o.withDefaults(g.BatchSize())
	if err != nil {
		t.Fatal(err)
	}
	kept := newCostModel(g, &fo).times(64)
	fo.BackpropFraction = 0
	whole := newCostModel(g, &fo).times(64)
	for i := range whole {
		if kept[i].f != whole[i].f || math.Abs(kept[i].bi-whole[i].bi/3) > 1e-12 || math.Abs(kept[i].bw-whole[i].bw/3) > 1e-12 {
			t.Fatalf("op %s: %+v kept a third, %+v whole", g.Op(i).Name, kept[i], whole[i])
		}
	}
	for _, e := range sb.Edges {
		if !(e.GradTransfer > 0 && e.GradTransfer < e.Transfer) {
			t.Errorf("edge %d→%d: gradients %.4g s, activations %.4g", e.From, e.To, e.GradTransfer, e.Transfer)
		}
	}
	back, err := plan.DecodePlan(sb.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if back.BackpropFraction != sb.BackpropFraction || !slices.Equal(back.Timing().Grad, sb.Timing().Grad) {
		t.Fatal("the plan file lost its backprop fraction or gradient transfers")
	}
	if back.Timing().Grad[0] == back.Timing().Act[0] {
		t.Fatal("the simulator prices the gradients as the activations")
	}
	var oe *OptionError
	for _, f := range []float64{-0.5, 1.5, math.NaN()} {
		o.BackpropFraction = f
		if _, err := Search(g, o); !errors.As(err, &oe) || oe.Flag != "backprop-fraction" {
			t.Errorf("fraction %v: got %v, want an OptionError of backprop-fraction", f, err)
		}
	}
}

// TestSelectiveKeepsTheLossWhole: where the full plan runs the loss's
// stage on data-parallel replicas, the plan priced for selective backprop
// runs it on one device (its history must see the whole batch).
func TestSelectiveKeepsTheLossWhole(t *testing.T) {
	t.Parallel()
	e, err := models.Lookup("mlp")
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.Build(e.Small)
	if err != nil {
		t.Fatal(err)
	}
	lossDevices := func(f float64) int {
		p, err := Search(g, Options{Device: plan.Profiles["cpu"], Devices: 6, MicroBatch: 8, BackpropFraction: f})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range p.Stages {
			if slices.Contains(s.Ops, g.Op(g.Loss()).Name) {
				return len(s.Devices)
			}
		}
		t.Fatal("no stage holds the loss")
		return 0
	}
	if n := lossDevices(0); n < 2 {
		t.Fatalf("the full plan runs the loss's stage on %d device(s): the case tests nothing", n)
	}
	if n := lossDevices(0.5); n != 1 {
		t.Fatalf("the selective plan runs the loss's stage on %d devices", n)
	}
}
