package stage

import (
	"strings"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/tensor/cuda"
	"github.com/graphpipe/graphpipe/tensor/cuda/cudatest"
)

// TestTimeOps: every op gets a time per pass at every size; ops without
// weights owe no weight pass, ops with weights take time in it.
func TestTimeOps(t *testing.T) {
	g := tinyMMT(t)
	sizes := []int{1, 2, 4}
	got, err := TimeOps(g, sizes, time.Millisecond, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < g.NumOps(); i++ {
		name := g.Op(i).Name
		s := got[name]
		if s == nil {
			t.Fatalf("op %q is not timed", name)
		}
		if len(s.MicroBatch) != len(sizes) || len(s.Forward) != len(sizes) || len(s.InputGrad) != len(sizes) || len(s.WeightGrad) != len(sizes) {
			t.Fatalf("op %q: %+v, want %d sizes", name, s, len(sizes))
		}
		for j, m := range sizes {
			if s.MicroBatch[j] != int64(m) || !(s.Forward[j] > 0) || s.InputGrad[j] < 0 {
				t.Fatalf("op %q at %d: %+v", name, m, s)
			}
			if weighted := len(g.Params(i)) > 0; weighted != (s.WeightGrad[j] > 0) {
				t.Fatalf("op %q (weights: %v) at %d: weight pass %g", name, weighted, m, s.WeightGrad[j])
			}
		}
	}
}

// tinyMMT is the small MMT at a batch of 4.
func tinyMMT(t *testing.T) *dag.Graph {
	t.Helper()
	e, _ := models.Lookup("mmt")
	c := e.Small
	c.Batch = 4
	g, err := e.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestTimeOpsSizes(t *testing.T) {
	e, _ := models.Lookup("mlp")
	g, err := e.Build(e.Small)
	if err != nil {
		t.Fatal(err)
	}
	for _, sizes := range [][]int{nil, {0}, {2, 1}} {
		if _, err := TimeOps(g, sizes, time.Millisecond, nil, nil); err == nil || !strings.Contains(err.Error(), "ascending") {
			t.Errorf("sizes %v: got %v", sizes, err)
		}
	}
}

// TestTimeOpsOnEmulator: the same on the CUDA code path (its CPU emulator),
// each op synchronised: every op timed, the weight pass where there are
// weights.
func TestTimeOpsOnEmulator(t *testing.T) { checkTimeOps(t, cudatest.Emulator(t)) }

// TestTimeOpsOnGPU is TestTimeOpsOnEmulator on a real GPU (skipped without one).
func TestTimeOpsOnGPU(t *testing.T) { checkTimeOps(t, cudatest.GPU(t)) }

func checkTimeOps(t *testing.T, dev *cuda.Device) {
	g := tinyMMT(t)
	got, err := TimeOps(g, []int{1, 4}, time.Millisecond, dev, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < g.NumOps(); i++ {
		s := got[g.Op(i).Name]
		if s == nil || len(s.Forward) != 2 || !(s.Forward[1] > 0) || (len(g.Params(i)) > 0) != (s.WeightGrad[1] > 0) {
			t.Fatalf("op %q: %+v", g.Op(i).Name, s)
		}
	}
}

// TestSpreadPass: a pass's time beyond its ops' clocks goes in equal shares
// to the ops that ran in it, never to one that did not, and nothing moves
// when the clocks already account for the pass.
func TestSpreadPass(t *testing.T) {
	cases := []struct {
		name  string
		times map[string]float64
		wall  float64
		want  map[string]float64
	}{
		{"shared", map[string]float64{"a": 1, "b": 2, "idle": 0}, 6, map[string]float64{"a": 2.5, "b": 3.5, "idle": 0}},
		{"accounted", map[string]float64{"a": 1, "b": 2}, 3, map[string]float64{"a": 1, "b": 2}},
		{"clocks over the wall", map[string]float64{"a": 1, "b": 2}, 2.5, map[string]float64{"a": 1, "b": 2}},
		{"nothing ran", map[string]float64{"a": 0}, 1, map[string]float64{"a": 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spreadPass(c.times, c.wall)
			for name, want := range c.want {
				if got := c.times[name]; got != want {
					t.Errorf("%s: %g, want %g", name, got, want)
				}
			}
		})
	}
}
