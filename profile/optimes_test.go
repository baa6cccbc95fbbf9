package profile

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
)

func TestMicroBatches(t *testing.T) {
	for _, tc := range []struct {
		batch int64
		want  []int
	}{
		{1, []int{1}},
		{2, []int{1, 2}},
		{16, []int{1, 2, 4, 8, 16}},
		{12, []int{1, 2, 4, 8, 12}},
		{0, nil},
	} {
		if got := MicroBatches(tc.batch); !slices.Equal(got, tc.want) {
			t.Errorf("batch %d: %v, want %v", tc.batch, got, tc.want)
		}
	}
}

// TestMeasureOpTimes: the small MLP's ops timed on the CPU come back as a
// valid op-times file for the planner: every op, every size, the model's
// hash and the device named; its memory need grows with the micro-batch.
func TestMeasureOpTimes(t *testing.T) {
	e, err := models.Lookup("mlp")
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.Build(e.Small)
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int{1, 4}
	var progress []int
	times, err := MeasureOpTimes(g, sizes, time.Millisecond, nil, Where(nil), func(m int) { progress = append(progress, m) })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(progress, sizes) {
		t.Errorf("progress told of %v, want %v", progress, sizes)
	}
	if times.Format != plan.OpTimesFormat || times.SHA256 != plan.OpsHash(g) || times.Model != g.Name() || !strings.HasPrefix(times.Device, "cpu (") {
		t.Errorf("header %q %q %q %q", times.Format, times.Model, times.SHA256, times.Device)
	}
	if len(times.Ops) != g.NumOps() {
		t.Fatalf("%d ops timed, the model has %d", len(times.Ops), g.NumOps())
	}
	for i := 0; i < g.NumOps(); i++ {
		s, ok := times.Ops[g.Op(i).Name]
		if !ok || len(s.MicroBatch) != len(sizes) || len(s.Forward) != len(sizes) {
			t.Fatalf("op %s: %+v", g.Op(i).Name, s)
		}
	}
	if _, err := MeasureOpTimes(g, []int{4, 1}, time.Millisecond, nil, "cpu", nil); err == nil {
		t.Error("sizes out of order were timed")
	}
	if a, b := OpTimesNeed(g, 1), OpTimesNeed(g, 4); !(a > 0 && b > a) {
		t.Errorf("timing at micro-batch 1 needs %d bytes, at 4 %d", a, b)
	}
}
