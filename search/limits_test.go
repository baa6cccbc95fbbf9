package search

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/partition"
	"github.com/graphpipe/graphpipe/plan"
)

// A batch whose bytes overflow int64 fits nowhere: before saturation, MMT at
// batch 2^36 on v100s "fit" as one stage with a peak of 0 bytes. A batch
// of 2^62 or more once overflowed the doubling of the micro-batch sizes
// tried, to 0, and divided by it (search --batch 9223372036854775807
// panicked), and an odd one near 2^63 the rounding up of its samples per
// device, to a negative count (the MLP "fit" as one stage).
func TestAbsurdBatchFitsNowhere(t *testing.T) {
	for _, model := range []string{"mmt", "mlp"} {
		e, _ := models.Lookup(model)
		g, _ := e.Build(e.Default)
		for _, batch := range []int64{1 << 36, 99999999999999, 1 << 62, math.MaxInt64} {
			p, err := Search(g, Options{Device: plan.Profiles["v100"], Devices: 2, Batch: batch})
			var np *NoPlanError
			if !errors.As(err, &np) {
				t.Fatalf("%s, batch %d: got a plan (micro-batch %d, peak %d bytes), want no plan", model, batch, p.MicroBatch, p.Predicted.PeakMemory)
			}
			if !strings.Contains(err.Error(), "at most 65536 micro-batches per iteration") {
				t.Errorf("%s, batch %d: %v does not say which sizes were tried", model, batch, err)
			}
		}
	}
}

// When no plan fits with MaxMicroBatches micro-batches, Search halves the
// micro-batch until one does, and that is the largest size that fits
// keeping every activation. Left to choose recomputation, it fits at larger
// sizes, and keeps a plan no slower.
func TestSmallerMicroBatchWhenNothingFits(t *testing.T) {
	e, _ := models.Lookup("mmt")
	g, _ := e.Build(e.Default)
	o := Options{Device: plan.Profiles["v100"], Devices: 8, Batch: 1 << 20, Recompute: "off", OptimizerState: plan.StateReplicated}
	p, err := Search(g, o)
	if err != nil {
		t.Fatal(err)
	}
	if p.MicroBatches <= MaxMicroBatches || p.MicroBatches > plan.MicroBatchLimit || !p.Predicted.Feasible {
		t.Fatalf("micro-batch %d × %d, feasible %v", p.MicroBatch, p.MicroBatches, p.Predicted.Feasible)
	}
	if !strings.Contains(strings.Join(p.Search.Notes, "\n"), "is the largest that does") {
		t.Errorf("notes %q do not say the micro-batch was reduced", p.Search.Notes)
	}
	o.MicroBatch = 2 * p.MicroBatch
	var np *NoPlanError
	if _, err := Search(g, o); !errors.As(err, &np) || !strings.Contains(err.Error(), "at micro-batch") {
		t.Errorf("forced micro-batch %d: got %v, want no plan at that size", o.MicroBatch, err)
	}
	o.Recompute = "auto"
	if q, err := Search(g, o); err != nil || !q.Recomputes() {
		t.Errorf("forced micro-batch %d recomputing: %v, want a plan that recomputes", o.MicroBatch, err)
	}
	o.MicroBatch = 0
	q, err := Search(g, o)
	if err != nil || q.Predicted.SamplesPerS < p.Predicted.SamplesPerS {
		t.Fatalf("free to recompute: %v, %.4g samples/s against %.4g keeping", err, q.Predicted.SamplesPerS, p.Predicted.SamplesPerS)
	}
	t.Logf("keeping: micro-batch %d, %.4g samples/s; free to recompute: micro-batch %d, %.4g samples/s, notes %q", p.MicroBatch, p.Predicted.SamplesPerS, q.MicroBatch, q.Predicted.SamplesPerS, q.Search.Notes)
}

func TestMicroBatchOptions(t *testing.T) {
	e, _ := models.Lookup("mlp")
	g, _ := e.Build(e.Small)
	for _, tc := range []struct {
		batch, micro int64
		want         string
	}{
		{64, -2, "must be positive"},
		{1 << 20, 8, "131072 micro-batches per iteration, over the 65536"},
	} {
		_, err := Search(g, Options{Device: plan.Profiles["cpu"], Devices: 2, Batch: tc.batch, MicroBatch: tc.micro})
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Flag != "micro-batch" || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("batch %d, micro-batch %d: got %v, want --micro-batch: ...%s", tc.batch, tc.micro, err, tc.want)
		}
	}
}

func TestSaturatingBytes(t *testing.T) {
	const top = math.MaxInt64
	for _, tc := range []struct{ a, b, mul, add int64 }{
		{0, top, 0, top},
		{3, 4, 12, 7},
		{1 << 31, 1 << 31, 1 << 62, 1 << 32},
		{1 << 32, 1 << 32, top, 1 << 33},
		{top, 1, top, top},
		{top / 2, 3, top, top/2 + 3},
	} {
		if got := satMul(tc.a, tc.b); got != tc.mul {
			t.Errorf("satMul(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.mul)
		}
		if got := satAdd(tc.a, tc.b); got != tc.add {
			t.Errorf("satAdd(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.add)
		}
	}
	for _, tc := range []struct {
		base, stash, limit int64
		want               int
	}{
		{10, 0, 10, math.MaxInt},
		{11, 0, 10, -1},
		{2, 3, 10, 2},
		{2, 4, 10, 2},
		{2, 9, 10, 0},
		{0, top, 1e15, 0},
		{0, 1, top, math.MaxInt32},
	} {
		if got := maxInFlight(tc.base, tc.stash, tc.limit); got != tc.want {
			t.Errorf("maxInFlight(%d, %d, %d) = %d, want %d", tc.base, tc.stash, tc.limit, got, tc.want)
		}
		// the oracle: the largest n ≤ 8 with base + n·stash ≤ limit, in big enough arithmetic
		if tc.stash > 0 && tc.stash < 1<<40 && tc.want < 8 {
			n := -1
			for k := 0; k <= 8; k++ {
				if float64(tc.base)+float64(k)*float64(tc.stash) <= float64(tc.limit) {
					n = k
				}
			}
			if n != tc.want {
				t.Errorf("maxInFlight(%d, %d, %d): table says %d, the oracle %d", tc.base, tc.stash, tc.limit, tc.want, n)
			}
		}
	}
}

func TestDPGroup(t *testing.T) {
	t.Parallel()
	const most = 128 // the rule, at a size where its cases are easy to check by hand
	for _, tc := range []struct{ devices, g int }{
		{1, 1}, {128, 1}, {129, 3}, {256, 2}, {300, 3}, {4096, 32}, {1021, 8},
	} {
		g := dpGroup(tc.devices, most)
		if g != tc.g {
			t.Errorf("dpGroup(%d, %d) = %d, want %d", tc.devices, most, g, tc.g)
		}
		if tc.devices/g > most {
			t.Errorf("dpGroup(%d, %d) = %d makes %d groups, over %d", tc.devices, most, g, tc.devices/g, most)
		}
	}
}

// TestGroupedDevices: past tuning.maxDPDevices the DP plans whole groups
// of devices. Its space is a subset of the ungrouped one, so its
// bottleneck is never below the ungrouped DP's; every stage takes whole
// groups; the plan says so.
func TestGroupedDevices(t *testing.T) {
	t.Parallel()
	grouped := defaultTuning()
	grouped.maxDPDevices = 4
	grouped.fewerDevices = false // on half the devices there are no groups
	for seed := int64(0); seed < 40; seed++ {
		g, err := models.RandomDAG(seed, 6+int(seed%10), 256)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := Options{Device: plan.Profiles["v100"], Devices: 8, DevicesPerNode: 4, Batch: 64}.withDefaults(64)
		cm := newCostModel(g, &o)
		sp := newSpace(cm, partition.Decompose(g, o.MaxSeries).Root, cm.boundary)
		cm.tu.maxDPDevices = 128
		free, okFree := newDP(sp, 8, 8, 8, false).minT(8)
		cm.tu = grouped
		d := newDP(sp, 8, 8, 8, false)
		least, ok := d.minT(d.D)
		if d.g != 2 || d.D != 4 {
			t.Fatalf("groups of %d, %d of them; want 4 of 2", d.g, d.D)
		}
		if ok && (!okFree || least < free*(1-1e-12)) {
			t.Fatalf("seed %d: grouped bottleneck %v below the ungrouped %v", seed, least, free)
		}
		p, err := searchTuned(g, o, grouped)
		if err != nil {
			continue
		}
		for s, st := range p.Stages {
			if len(st.Devices)%2 != 0 {
				t.Fatalf("seed %d: stage %d on %d devices, not whole groups of 2", seed, s, len(st.Devices))
			}
		}
		if len(p.Stages) > 0 && !strings.Contains(strings.Join(p.Search.Notes, "\n"), "devices planned in groups of 2") {
			t.Errorf("seed %d: notes %q do not say the devices went in groups", seed, p.Search.Notes)
		}
	}
}

// TestManyDevices: the largest device count the options allow plans (before
// groups, 2048 devices of the paper's MMT ran out of memory and were killed).
func TestManyDevices(t *testing.T) {
	e, _ := models.Lookup("mlp")
	g, _ := e.Build(e.Small)
	p, err := Search(g, Options{Device: plan.Profiles["cpu"], Devices: 4096, Batch: 65536})
	if err != nil {
		t.Fatal(err)
	}
	used := 0
	for _, st := range p.Stages {
		used += len(st.Devices)
	}
	if used < 1 || used > 4096 || p.Predicted.SamplesPerS <= 0 {
		t.Fatalf("%d devices used, %v samples/s", used, p.Predicted.SamplesPerS)
	}
}

// TestOptimizerStateIsPlanned: a plan's predicted memory counts the
// optimizer's state per parameter it is told: none (SGD), 4 bytes (SGD with
// momentum) or Adam's 8, which 0 stands for.
func TestOptimizerStateIsPlanned(t *testing.T) {
	g := smallMMT(t)
	peak := map[int64]int64{}
	for _, b := range []int64{NoOptimizerState, 4, 8, 0} {
		p, err := Search(g, Options{Device: plan.Profiles["cpu"], Devices: 1, MicroBatch: 4, OptimizerBytes: b})
		if err != nil {
			t.Fatal(err)
		}
		peak[b] = p.Predicted.PeakMemory
	}
	params := g.Total().Params
	if peak[4]-peak[NoOptimizerState] != 4*params || peak[8]-peak[4] != 4*params || peak[0] != peak[8] {
		t.Errorf("peaks %v for %d parameters: want steps of 4 bytes each from none to 8, and 0 as 8", peak, params)
	}
	if _, err := Search(g, Options{Device: plan.Profiles["cpu"], Devices: 1, OptimizerBytes: -5}); err == nil {
		t.Error("negative optimizer state was planned")
	}
}

// TestDevicesPerNodePastTheDevices: more devices to a node than the search
// has is one node of them all, however many more: the plan is the one for
// a node of exactly the devices. Placement once rounded the nodes up by
// adding the devices per node first, which overflowed at 2^63 − 1 and
// panicked (search --devices-per-node 9223372036854775807).
func TestDevicesPerNodePastTheDevices(t *testing.T) {
	g := zooModel(t, "mlp")
	want, err := Search(g, Options{Device: plan.Profiles["v100"], Devices: 4, DevicesPerNode: 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, perNode := range []int{5, 1 << 40, math.MaxInt} {
		p, err := Search(g, Options{Device: plan.Profiles["v100"], Devices: 4, DevicesPerNode: perNode})
		if err != nil {
			t.Fatalf("%d per node: %v", perNode, err)
		}
		if p.Predicted.IterationS != want.Predicted.IterationS || len(p.Stages) != len(want.Stages) {
			t.Errorf("%d per node: %d stages, %g s; one node of 4: %d stages, %g s", perNode, len(p.Stages), p.Predicted.IterationS, len(want.Stages), want.Predicted.IterationS)
		}
	}
}
