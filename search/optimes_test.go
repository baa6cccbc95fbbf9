package search

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
)

// analyticTimes are op times that say exactly what the cost model computes
// from FLOPs and bytes, at every per-device micro-batch from 1 to batch.
func analyticTimes(g *dag.Graph, o Options, batch int64) *plan.OpTimes {
	cm := newCostModel(g, &o)
	t := &plan.OpTimes{Format: plan.OpTimesFormat, Model: g.Name(), SHA256: plan.OpsHash(g), Device: "the cost model", Ops: map[string]plan.OpSeries{}}
	for i := 0; i < g.NumOps(); i++ {
		var s plan.OpSeries
		for m := int64(1); m <= batch; m++ {
			ot := cm.opTime(i, m)
			s.MicroBatch = append(s.MicroBatch, m)
			s.Forward, s.InputGrad, s.WeightGrad = append(s.Forward, ot.f), append(s.InputGrad, ot.bi), append(s.WeightGrad, ot.bw)
		}
		t.Ops[g.Op(i).Name] = s
	}
	return t
}

func smallMMT(t *testing.T) *dag.Graph {
	t.Helper()
	e, _ := models.Lookup("mmt")
	g, err := e.Build(e.Small)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestOpTimesPriceTheSearch: op times that equal the cost model's own give
// the same plan as no op times; doubled, they double every stage's compute.
func TestOpTimesPriceTheSearch(t *testing.T) {
	g := smallMMT(t)
	o := Options{Device: plan.Profiles["cpu"], Devices: 4}
	plain, err := Search(g, o)
	if err != nil {
		t.Fatal(err)
	}
	o.OpTimes = analyticTimes(g, o, g.BatchSize())
	same, err := Search(g, o)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, g, same)
	if same.Predicted != plain.Predicted || !reflect.DeepEqual(same.Stages, plain.Stages) {
		t.Fatalf("the cost model's own times as op times changed the plan: %+v, want %+v", same.Predicted, plain.Predicted)
	}
	if n := same.Search.Notes; len(n) == 0 || !strings.HasPrefix(n[len(n)-1], "op times measured on the cost model") {
		t.Fatalf("notes %q do not say where the op times come from", n)
	}

	one := Options{Device: plan.Profiles["cpu"], Devices: 1, MicroBatch: g.BatchSize()}
	base, err := Search(g, one)
	if err != nil {
		t.Fatal(err)
	}
	one.OpTimes = analyticTimes(g, one, g.BatchSize())
	for _, s := range one.OpTimes.Ops {
		for j := range s.Forward {
			s.Forward[j] *= 2
			s.InputGrad[j] *= 2
			s.WeightGrad[j] *= 2
		}
	}
	twice, err := Search(g, one)
	if err != nil {
		t.Fatal(err)
	}
	b, w := base.Stages[0], twice.Stages[0]
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"forward", w.ForwardS, 2 * b.ForwardS}, {"backward", w.BackwardS, 2 * b.BackwardS}, {"weights", w.WeightS, 2 * b.WeightS}} {
		if math.Abs(c.got-c.want) > 1e-9*c.want {
			t.Errorf("%s: %g with doubled op times, want %g", c.name, c.got, c.want)
		}
	}
}

// TestOpTimesOfAnotherModel: times measured on one model are refused for
// another, naming the flag.
func TestOpTimesOfAnotherModel(t *testing.T) {
	g := smallMMT(t)
	e, _ := models.Lookup("mlp")
	other, err := e.Build(e.Small)
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Device: plan.Profiles["cpu"], Devices: 2}
	o.OpTimes = analyticTimes(other, o, 4)
	_, err = Search(g, o)
	var oe *OptionError
	if !errors.As(err, &oe) || oe.Flag != "op-times" || !strings.Contains(err.Error(), "not on this one") {
		t.Fatalf("got %v, want an op-times OptionError", err)
	}
	// another seed and batch: the same ops, the same times
	m := *g.Model()
	m.Seed, m.BatchSize = m.Seed+1, 2*m.BatchSize
	reseeded, err := dag.Build(&m)
	if err != nil {
		t.Fatal(err)
	}
	o.OpTimes = analyticTimes(g, o, 4)
	if _, err := Search(reseeded, o); err != nil {
		t.Fatalf("op times refused for another seed and batch of the same model: %v", err)
	}
	delete(o.OpTimes.Ops, g.Op(3).Name)
	if _, err = Search(g, o); !errors.As(err, &oe) || !strings.Contains(err.Error(), g.Op(3).Name) {
		t.Fatalf("an untimed op: got %v, want it named", err)
	}
}

func TestOpSeriesAt(t *testing.T) {
	s := plan.OpSeries{MicroBatch: []int64{2, 4, 8}, Forward: []float64{1, 2, 6}, InputGrad: []float64{0, 0, 0}, WeightGrad: []float64{3, 3, 3}}
	for _, c := range []struct {
		m    int64
		want float64
	}{{1, 1}, {2, 1}, {3, 1.5}, {4, 2}, {6, 4}, {8, 6}, {16, 12}, {12, 9}} {
		if got := seriesAt(&s, c.m); got.f != c.want || got.bi != 0 || got.bw != 3*math.Max(1, float64(c.m)/8) {
			t.Errorf("at(%d) = %+v, want forward %g", c.m, got, c.want)
		}
	}
}

// FuzzOpSeriesAt: every op of an op-times file that decodes has a
// non-negative time at any micro-batch, inside the measured sizes and past
// them.
func FuzzOpSeriesAt(f *testing.F) {
	f.Add([]byte(`{"format":"graphpipe/optimes@1","model":"m","model_sha256":"ab","device":"cpu","ops":{"x":{"micro_batch":[1,2],"forward_s":[1,2],"input_grad_s":[1,2],"weight_grad_s":[0,0]}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ot, err := plan.DecodeOpTimes(data)
		if err != nil {
			return
		}
		for _, s := range ot.Ops {
			for _, m := range []int64{1, s.MicroBatch[0], s.MicroBatch[len(s.MicroBatch)-1] + 1} {
				if v := seriesAt(&s, m); v.f < 0 || v.bi < 0 || v.bw < 0 {
					t.Fatalf("negative time at %d: %+v", m, v)
				}
			}
		}
	})
}
