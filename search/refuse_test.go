package search

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
)

// zoo builds a zoo model at its paper configuration with knobs changed.
func zoo(t *testing.T, name string, knobs map[string]int64) *dag.Graph {
	t.Helper()
	e, err := models.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	c := e.Default
	for k, v := range knobs {
		c.Set(k, v)
	}
	g, err := e.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestRefusals: what no plan can fit is refused before any search, naming
// the op and the numbers: an op whose state alone overflows a device (the
// issue's DLRM and CANDLE-Uno at 64 branches), one whose fewest activations
// do (a batch that even 65536 micro-batches leave too large), a forced
// micro-batch too large for an op, and a model whose ops each fit but
// whose state overflows the cluster.
func TestRefusals(t *testing.T) {
	v100 := plan.Profiles["v100"]
	cases := []struct {
		name string
		g    *dag.Graph
		o    Options
		op   string
		want string
	}{
		{"dlrm-64-branches", zoo(t, "dlrm", map[string]int64{"branches": 64}), Options{Device: v100, Devices: 64, OptimizerState: plan.StateReplicated},
			"top.fc0", `op "top.fc0" alone needs 17.2 GB for its weights, gradients and optimizer state, over the 16 GB a device has`},
		{"candle-uno-64-branches", zoo(t, "candle-uno", map[string]int64{"branches": 64}), Options{Device: v100, Devices: 32, OptimizerState: plan.StateReplicated},
			"top.fc0", `op "top.fc0" alone needs`},
		{"activations", zoo(t, "mmt", nil), Options{Device: v100, Devices: 8, Batch: 1 << 36},
			"b0.l0.gelu", "for the activations of 131072 samples (micro-batches of at least 1048576 (the batch of 68719476736 in at most 65536 micro-batches per iteration) over 8 devices)"},
		{"forced-micro-batch", zoo(t, "mmt", nil), Options{Device: v100, Devices: 2, Batch: 1 << 16, MicroBatch: 1 << 16},
			"b0.l0.gelu", "(micro-batch 65536 over 2 devices)"},
		{"total", zoo(t, "dlrm", nil), Options{Device: v100, Devices: 1, OptimizerState: plan.StateReplicated},
			"top.fc0", "the model's weights, gradients and optimizer state take 17.4 GB in all, over the 16 GB that 1 device of 16 GB hold"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Search(c.g, c.o)
			var np *NoPlanError
			if !errors.As(err, &np) || !np.Bound {
				t.Fatalf("got %v, want a refusal before the search", err)
			}
			if np.Op != c.op || !strings.Contains(err.Error(), c.want) || np.Need <= np.Limit || strings.Contains(err.Error(), "\n") {
				t.Errorf("refusal %q (op %q, need %d, limit %d), want op %q and %q on one line", err, np.Op, np.Need, np.Limit, c.op, c.want)
			}
		})
	}
}

// TestRefusalsAreSound: the clever thing against the simple thing. On
// random DAGs and the zoo's small models, with memory squeezed from ample to
// nothing, every model refused before the search is one the search itself
// finds no plan for, wherever the optimizer state may live; and refusals
// do happen.
func TestRefusalsAreSound(t *testing.T) {
	t.Parallel()
	searchAll := defaultTuning()
	searchAll.refuseFirst = false // the search the refusals save
	var graphs []*dag.Graph
	for seed := int64(0); seed < 12; seed++ {
		g, err := models.RandomDAG(seed, 4+int(seed%6), 256)
		if err != nil {
			t.Fatal(err)
		}
		graphs = append(graphs, g)
	}
	for _, name := range []string{"mlp", "case-study", "dlrm"} {
		e, _ := models.Lookup(name)
		g, err := e.Build(e.Small)
		if err != nil {
			t.Fatal(err)
		}
		graphs = append(graphs, g)
	}
	refused, planned := 0, 0
	for gi, g := range graphs {
		var static int64
		for i := 0; i < g.NumOps(); i++ {
			static += g.Cost(i).Params * 16
		}
		for _, state := range stateChoices {
			for _, devices := range []int{1, 3} {
				for _, frac := range []float64{0.05, 0.2, 0.4, 0.7, 1, 1.5, 3} {
					o := Options{Device: plan.Profiles["cpu"], Devices: devices, Batch: 64, MemoryLimit: max(1, int64(frac*float64(static)/float64(devices))), OptimizerState: state}
					name := fmt.Sprintf("graph %d, %s, %d devices, %d bytes", gi, state, devices, o.MemoryLimit)
					_, err := Search(g, o)
					var np *NoPlanError
					if !errors.As(err, &np) || !np.Bound {
						planned++
						continue
					}
					refused++
					p, err := searchTuned(g, o, searchAll)
					if !errors.As(err, &np) {
						t.Errorf("%s: refused, but the search finds a plan of %d stages (peak %d bytes)", name, len(p.Stages), p.Predicted.PeakMemory)
					}
				}
			}
		}
	}
	if refused < 10 || planned < 10 {
		t.Errorf("%d refused, %d searched: the test barely ran", refused, planned)
	}
	t.Logf("%d refused, %d searched", refused, planned)
}
