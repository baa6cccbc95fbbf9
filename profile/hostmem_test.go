package profile

import (
	"math"
	"os"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
)

func TestMemTotal(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       int64
	}{
		{"meminfo", "MemTotal:       16318828 kB\nMemFree:         1205248 kB\n", 16318828 << 10},
		{"not first", "Something: 1 kB\nMemTotal: 2 kB\n", 2 << 10},
		{"missing", "MemFree: 3 kB\n", 0},
		{"empty", "", 0},
		{"garbled", "MemTotal: lots kB\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := memTotal(strings.NewReader(tc.text)); got != tc.want {
				t.Errorf("%d, want %d", got, tc.want)
			}
		})
	}
}

// TestHostMemory: where /proc/meminfo can be read, this host has some
// memory, and the CPU's op-timing memory is the host's.
func TestHostMemory(t *testing.T) {
	if _, err := os.Stat("/proc/meminfo"); err != nil {
		t.Skipf("no /proc/meminfo: %v", err)
	}
	m := HostMemory()
	if m < 1<<20 {
		t.Fatalf("host memory %d bytes", m)
	}
	if got := Memory(nil); got != m {
		t.Errorf("the CPU's memory %d, want the host's %d", got, m)
	}
}

func TestFits(t *testing.T) {
	for _, tc := range []struct {
		need float64
		have int64
		want bool
	}{
		{1e9, 0, true},             // unknown host
		{899, 1000, true},          // under HostShare
		{900, 1000, true},          // at it
		{901, 1000, false},         // over it
		{math.Inf(1), 1e12, false}, // fits nowhere
	} {
		if got := Fits(tc.need, tc.have); got != tc.want {
			t.Errorf("%g bytes on a host of %d: %v, want %v", tc.need, tc.have, got, tc.want)
		}
	}
}

// TestTrainNeed: one more sample in the batch costs its inputs' bytes, one
// more in the micro-batch its outputs and stash, one more byte of optimizer
// state per parameter the parameters.
func TestTrainNeed(t *testing.T) {
	e, err := models.Lookup("mlp")
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.Build(e.Small)
	if err != nil {
		t.Fatal(err)
	}
	tot := g.Total()
	in := 0.0
	for _, x := range g.Inputs() {
		in += float64(x.Shape.Elems()) * float64(x.DType.Size())
	}
	base := TrainNeed(g, 8, 4, 8)
	for _, tc := range []struct {
		name string
		got  float64
		want float64
	}{
		{"batch", TrainNeed(g, 9, 4, 8) - base, in},
		{"micro-batch", TrainNeed(g, 8, 5, 8) - base, float64(tot.OutBytes + tot.StashBytes)},
		{"optimizer state", TrainNeed(g, 8, 4, 9) - base, float64(tot.Params)},
		{"weights and gradients", TrainNeed(g, 0, 0, 0), 8 * float64(tot.Params)},
	} {
		if math.Abs(tc.got-tc.want) > 1e-6*tc.want {
			t.Errorf("%s: %g bytes, want %g", tc.name, tc.got, tc.want)
		}
	}
	if in <= 0 || tot.Params <= 0 {
		t.Fatalf("the model has %g input bytes and %d parameters", in, tot.Params)
	}
}

// TestPlanNeed: every device holds its stage's peak; a saturated stage
// fits nowhere.
func TestPlanNeed(t *testing.T) {
	p := &plan.Plan{Stages: []plan.PlanStage{{PeakBytes: 100, Devices: []int{0, 1}}, {PeakBytes: 30, Devices: []int{2}}}}
	if got := PlanNeed(p); got != 230 {
		t.Errorf("%g bytes, want 230", got)
	}
	p.Stages[1].PeakBytes = math.MaxInt64
	if got := PlanNeed(p); !math.IsInf(got, 1) {
		t.Errorf("a saturated stage needs %g bytes", got)
	}
}
