package supervise

import (
	"math"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/search"
	"github.com/graphpipe/graphpipe/stage"
)

// shortTimings are the timings of the tests that wait for silence: a beat
// every 100 ms, silent after 1 s, an offer confirmed within 300 ms.
func shortTimings() runtime.Timings {
	return runtime.Timings{HeartbeatEvery: 100 * time.Millisecond, HeartbeatTimeout: time.Second, ConfirmTimeout: 300 * time.Millisecond}
}

// smallPlan builds the small preset of a zoo model and plans it on cpu
// devices with a fixed micro-batch.
func smallPlan(t *testing.T, model string, devices int, micro int64) (*dag.Graph, *plan.Plan) {
	t.Helper()
	e, err := models.Lookup(model)
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.Build(e.Small)
	if err != nil {
		t.Fatal(err)
	}
	p, err := search.Search(g, search.Options{Device: plan.Profiles["cpu"], Devices: devices, MicroBatch: micro})
	if err != nil {
		t.Fatal(err)
	}
	return g, p
}

// equalParams fails the test when a parameter of got differs from want's by
// more than tol of want's largest value.
func equalParams(t *testing.T, got, want map[string]*stage.Value[float32], tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d parameters, want %d", len(got), len(want))
	}
	for name, w := range want {
		g := got[name]
		scale, worst := 0.0, 0.0
		for i := range w.Data {
			scale = math.Max(scale, math.Abs(float64(w.Data[i])))
			worst = math.Max(worst, math.Abs(float64(g.Data[i]-w.Data[i])))
		}
		if worst > tol*math.Max(scale, 1e-12) {
			t.Fatalf("%s differs from the reference run by %.3g (scale %.3g)", name, worst, scale)
		}
	}
}
