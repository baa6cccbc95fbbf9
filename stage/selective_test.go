package stage

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
)

// sbNet has every kind of stash selective backprop cuts (attention's,
// layer_norm's, max pooling's argmax, the loss's probabilities) and ops
// whose stash is nothing (linear, relu, reshape, mean), an op made of
// nothing (parameter), and two branches that join.
const sbNet = `{"format":"graphpipe/model@2","batch_size":8,"seed":5,
 "inputs":[{"name":"x","shape":[4,6],"dtype":"float32"},{"name":"label","shape":[],"dtype":"int32","range":[0,3]}],
 "ops":[
  {"name":"in","op":"linear","inputs":["x"],"attrs":{"out":8}},
  {"name":"attn","op":"attention","inputs":["in"],"attrs":{"heads":2}},
  {"name":"ln","op":"layer_norm","inputs":["attn"]},
  {"name":"img","op":"reshape","inputs":["ln"],"attrs":{"shape":[1,4,8]}},
  {"name":"mp","op":"max_pool2d","inputs":["img"],"attrs":{"kernel":[2,2]}},
  {"name":"f","op":"flatten","inputs":["mp"]},
  {"name":"pm","op":"parameter","inputs":[],"attrs":{"shape":[8]}},
  {"name":"g","op":"add","inputs":["f","pm"]},
  {"name":"m","op":"mean","inputs":["ln"],"attrs":{"axis":0}},
  {"name":"r","op":"relu","inputs":["m"]},
  {"name":"cat","op":"concat","inputs":["g","r"]},
  {"name":"out","op":"linear","inputs":["cat"],"attrs":{"out":3}},
  {"name":"loss","op":"softmax_cross_entropy","inputs":["out","label"]}]}`

func sbGraph(t *testing.T) *dag.Graph {
	t.Helper()
	g, err := dag.Load([]byte(sbNet))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// sgdStep runs one step of batch in micro-batches of b on a fresh
// executor of g, each micro-batch's backward on the rows keep gives it
// (nil: all), and returns the parameters after an SGD step of rate 1: the
// parameters minus the step's gradient.
func sgdStep(t *testing.T, g *dag.Graph, batch map[string]*Value[float32], b int, recompute bool, keep func(j int) []int) map[string]*Value[float32] {
	return sgdStepClipped(t, g, batch, b, recompute, 0, keep)
}

// sgdStepClipped is sgdStep with the gradients clipped to a global norm of
// clip (0: none).
func sgdStepClipped(t *testing.T, g *dag.Graph, batch map[string]*Value[float32], b int, recompute bool, clip float64, keep func(j int) []int) map[string]*Value[float32] {
	t.Helper()
	ex, err := NewExecutor(g, allOps(g), g.Seed())
	if err != nil {
		t.Fatal(err)
	}
	ex.Recompute = recompute
	if err := ex.SetOptimizer(TrainOptions{Optimizer: "sgd", LR: 1, ClipGradNorm: clip}); err != nil {
		t.Fatal(err)
	}
	n := batchRows(batch)
	loss := g.Op(g.Loss()).Name
	kept := 0
	for j := 0; j < n/b; j++ {
		feeds := map[string]*Value[float32]{}
		for name, v := range batch {
			feeds[name] = SliceRows(v, j*b, (j+1)*b)
		}
		if _, err := ex.Forward(j, Position{Step: 0, Sample: j * b}, feeds); err != nil {
			t.Fatal(err)
		}
		rows := keep(j)
		if rows == nil {
			kept += b
		} else {
			kept += len(rows)
			if err := ex.Compact(j, rows); err != nil {
				t.Fatal(err)
			}
		}
		seed := &Value[float32]{Shape: []int{1}, Data: []float32{float32(b) / float32(n)}}
		if _, err := ex.Backward(j, map[string]*Value[float32]{loss: seed}, true); err != nil {
			t.Fatal(err)
		}
	}
	ex.Selected(kept, n)
	if _, err := ex.EndStep(context.Background(), 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := ex.ApplyStep(false); err != nil {
		t.Fatal(err)
	}
	return copyValues(ex.Params)
}

// keptBatch is the rows of batch that keep gives each micro-batch of b.
func keptBatch(batch map[string]*Value[float32], b int, keep func(j int) []int) (map[string]*Value[float32], int) {
	var rows []int
	n := batchRows(batch)
	for j := 0; j < n/b; j++ {
		for _, r := range keep(j) {
			rows = append(rows, j*b+r)
		}
	}
	out := map[string]*Value[float32]{}
	for name, v := range batch {
		out[name] = gatherRows(v, rows)
	}
	return out, len(rows)
}

// near fails where got and want differ by more than tol·max(1, |want|).
func near(t *testing.T, name string, got, want []float32, tol float64) {
	t.Helper()
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > tol*math.Max(1, math.Abs(float64(want[i]))) {
			t.Fatalf("%s[%d] = %v, want %v", name, i, got[i], want[i])
		}
	}
}

func gatherRows(v *Value[float32], rows []int) *Value[float32] {
	per := len(v.Data) / v.Shape[0]
	if v.Ints != nil {
		per = len(v.Ints) / v.Shape[0]
	}
	out := &Value[float32]{Shape: append([]int{len(rows)}, v.Shape[1:]...)}
	for _, r := range rows {
		if v.Ints != nil {
			out.Ints = append(out.Ints, v.Ints[r*per:(r+1)*per]...)
		} else {
			out.Data = append(out.Data, v.Data[r*per:(r+1)*per]...)
		}
	}
	return out
}

// TestCompactIsTheKeptRowsStep: a step whose micro-batches run their
// backward on the rows kept, compacted, with Selected, steps as a step on
// the kept samples alone does: its gradient is the mean over them. It
// holds keeping the activations or recomputing them, and across
// micro-batches that keep different counts, one none.
func TestCompactIsTheKeptRowsStep(t *testing.T) {
	g := sbGraph(t)
	ds, err := NewDataset(g)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := ds.Batch(0, 16)
	if err != nil {
		t.Fatal(err)
	}
	keep := func(j int) []int { return [][]int{{0, 3}, {}, {1}, {0, 1, 2, 3}}[j] }
	sub, k := keptBatch(batch, 4, keep)
	want := sgdStep(t, g, sub, k, false, func(int) []int { return nil })
	for _, recompute := range []bool{false, true} {
		got := sgdStep(t, g, batch, 4, recompute, keep)
		for name, w := range want {
			near(t, name, got[name].Data, w.Data, 1e-6)
		}
	}
	wantClipped := sgdStepClipped(t, g, sub, k, false, 0.05, func(int) []int { return nil })
	gotClipped := sgdStepClipped(t, g, batch, 4, false, 0.05, keep)
	for name, w := range wantClipped { // the clip's norm is the kept samples' mean gradient's
		near(t, "clipped "+name, gotClipped[name].Data, w.Data, 1e-6)
	}
	all := sgdStep(t, g, batch, 4, false, func(int) []int { return []int{0, 1, 2, 3} })
	full := sgdStep(t, g, batch, 4, false, func(int) []int { return nil })
	for name := range full {
		if !slices.Equal(all[name].Data, full[name].Data) {
			t.Fatalf("%s: every row kept is not the full step bit for bit", name)
		}
	}
}

// TestCompactMisuse: Compact names what is wrong with its call.
func TestCompactMisuse(t *testing.T) {
	g := sbGraph(t)
	ex, err := NewExecutor(g, allOps(g), 1)
	if err != nil {
		t.Fatal(err)
	}
	ds, _ := NewDataset(g)
	batch, _ := ds.Batch(0, 4)
	if err := ex.Compact(0, []int{0}); err == nil {
		t.Fatal("Compact before Forward passed")
	}
	if _, err := ex.Forward(0, Position{}, batch); err != nil {
		t.Fatal(err)
	}
	for _, rows := range [][]int{{1, 0}, {4}, {-1}, {2, 2}} {
		if err := ex.Compact(0, rows); err == nil {
			t.Fatalf("Compact(%v) of 4 rows passed", rows)
		}
	}
	if err := ex.Compact(0, []int{1}); err != nil {
		t.Fatal(err)
	}
	if err := ex.Compact(0, []int{1}); err == nil {
		t.Fatal("a second Compact passed")
	}
}

// TestSampleLossesAverageToTheLoss: each loss kind's per-sample losses
// average to the loss its op computes.
func TestSampleLossesAverageToTheLoss(t *testing.T) {
	models := map[string]*dag.Graph{"softmax_cross_entropy": sbGraph(t)}
	for _, loss := range []string{"mse", "bce_with_logits"} {
		g, err := dag.Load([]byte(`{"format":"graphpipe/model@1","batch_size":6,"seed":2,
 "inputs":[{"name":"x","shape":[5],"dtype":"float32"},{"name":"t","shape":[3],"dtype":"float32"}],
 "ops":[{"name":"l","op":"linear","inputs":["x"],"attrs":{"out":3}},{"name":"loss","op":"` + loss + `","inputs":["l","t"]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		models[loss] = g
	}
	for kind, g := range models {
		ex, err := NewExecutor(g, allOps(g), 1)
		if err != nil {
			t.Fatal(err)
		}
		ex.SampleLoss = true
		ds, _ := NewDataset(g)
		n := int(g.BatchSize())
		batch, _ := ds.Batch(0, n)
		out, err := ex.Forward(0, Position{}, batch)
		if err != nil {
			t.Fatal(err)
		}
		per := ex.SampleLosses(0)
		if len(per) != n {
			t.Fatalf("%s: %d per-sample losses of %d samples", kind, len(per), n)
		}
		mean := 0.0
		for _, l := range per {
			mean += l / float64(n)
		}
		if got := out["loss"].Data[0]; math.Abs(mean-float64(got)) > 1e-5*math.Max(1, math.Abs(mean)) {
			t.Errorf("%s: per-sample losses average %v, the op %v", kind, mean, got)
		}
	}
}

// TestCheckSelective refuses batch_norm's models, naming the op.
func TestCheckSelective(t *testing.T) {
	if err := CheckSelective(sbGraph(t)); err != nil {
		t.Fatal(err)
	}
	v2, err := dag.Load([]byte(v2Net))
	if err != nil {
		t.Fatal(err)
	}
	var ue *UnselectableError
	if err := CheckSelective(v2); !errors.As(err, &ue) || ue.Op != "bn" {
		t.Fatalf("got %v, want an UnselectableError of op bn", err)
	}
}

// TestSelectorRule: warm-up and an empty history keep all; a loss above
// the whole history is always kept; the rule keeps about 1/(β+1) of
// samples whose percentiles are uniform, the same ones every time; the
// history holds the last Window finite losses and round-trips.
func TestSelectorRule(t *testing.T) {
	for _, c := range []struct {
		s     Selective
		field string
	}{{Selective{Beta: 0, Window: 1}, "beta"}, {Selective{Beta: math.Inf(1), Window: 1}, "beta"}, {Selective{Beta: 1, Window: 0}, "window"}, {Selective{Beta: 1, Window: 1, WarmupSteps: -1}, "warmup_steps"}} {
		var se *SelectiveError
		if _, err := NewSelector(c.s, 1); !errors.As(err, &se) || se.Field != c.field {
			t.Errorf("%+v: got %v, want an error of %s", c.s, err, c.field)
		}
	}
	s, err := NewSelector(Selective{Beta: 2, Window: 1000, WarmupSteps: 1}, 7)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Keep(5, 0, 0) {
		t.Fatal("a sample was skipped with no history")
	}
	hist := make([]float64, 1000)
	for i := range hist {
		hist[i] = float64(i) / 1000
	}
	s.Record(append([]float64{math.NaN(), 99}, hist...))
	if h := s.History(); len(h) != 1000 || h[0] != 0 {
		t.Fatalf("history of %d from %v, want the last 1000 finite losses", len(h), h[0])
	}
	if !s.Keep(0, 3, -1) {
		t.Fatal("a sample was skipped during warm-up")
	}
	kept := 0
	for i := 0; i < 20000; i++ {
		l := float64(i%1000) / 1000
		if s.Keep(1, i, l) {
			kept++
		}
		if s.Keep(1, i, l) != s.Keep(1, i, l) {
			t.Fatal("a decision changed when asked again")
		}
	}
	if f := float64(kept) / 20000; math.Abs(f-1.0/3) > 0.02 {
		t.Fatalf("kept %.3f of the samples at beta 2, want about 1/3", f)
	}
	if !s.Keep(1, 0, 2) {
		t.Fatal("a loss above the whole history was skipped")
	}
	r, _ := NewSelector(s.Settings(), 7)
	if err := r.SetHistory(s.History()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if r.Keep(1, i, 0.5) != s.Keep(1, i, 0.5) {
			t.Fatal("a selector restored from a history decides otherwise")
		}
	}
	if err := r.SetHistory([]float64{math.NaN()}); err == nil {
		t.Fatal("a history holding NaN was restored")
	}
}

// TestTrainerSelective: a trainer with selective backprop counts the
// samples that had a backward pass (all during warm-up, fewer after), and
// its steps are a function of (seed, step) alone: two trainers agree bit
// for bit.
func TestTrainerSelective(t *testing.T) {
	g := sbGraph(t)
	o := TrainOptions{Optimizer: "adam", LR: 1e-2, MicroBatch: 2, Selective: &Selective{Beta: 3, Window: 16, WarmupSteps: 2}}
	run := func() ([]int, map[string]*Value[float32]) {
		tr, err := NewTrainer(g, o)
		if err != nil {
			t.Fatal(err)
		}
		var counts []int
		for step := 0; step < 6; step++ {
			if _, _, err := tr.Step(step); err != nil {
				t.Fatal(err)
			}
			counts = append(counts, tr.Backprop())
		}
		return counts, copyValues(tr.Ex.Params)
	}
	c1, p1 := run()
	c2, p2 := run()
	if !slices.Equal(c1, c2) {
		t.Fatalf("backprop counts %v, then %v", c1, c2)
	}
	for name := range p1 {
		if !slices.Equal(p1[name].Data, p2[name].Data) {
			t.Fatalf("%s differs between two runs", name)
		}
	}
	if c1[0] != 8 || c1[1] != 8 {
		t.Fatalf("warm-up steps backpropagated %v, want all 8", c1[:2])
	}
	total := 0
	for _, c := range c1[2:] {
		total += c
	}
	if total >= 32 {
		t.Fatalf("after warm-up every sample was kept: %v", c1)
	}
	v2, _ := dag.Load([]byte(v2Net))
	if _, err := NewTrainer(v2, o); err == nil {
		t.Fatal("a trainer of a batch_norm model took selective backprop")
	}
}

// TestDropoutOnKeptRows: a pass on kept rows (Position.Kept) draws each
// row's dropout mask as the whole micro-batch's pass drew it for that row.
func TestDropoutOnKeptRows(t *testing.T) {
	g, err := dag.Load([]byte(`{"format":"graphpipe/model@2","batch_size":6,"seed":2,
 "inputs":[{"name":"x","shape":[16],"dtype":"float32"},{"name":"t","shape":[16],"dtype":"float32"}],
 "ops":[{"name":"d","op":"dropout","inputs":["x"],"attrs":{"p":0.5}},{"name":"loss","op":"mse","inputs":["d","t"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	ex, err := NewExecutor(g, allOps(g), 3)
	if err != nil {
		t.Fatal(err)
	}
	ds, _ := NewDataset(g)
	batch, _ := ds.Batch(0, 6)
	whole, err := ex.Forward(0, Position{Step: 4, Sample: 6}, batch)
	if err != nil {
		t.Fatal(err)
	}
	rows := []int{1, 4}
	feeds := map[string]*Value[float32]{}
	for name, v := range batch {
		feeds[name] = gatherRows(v, rows)
	}
	part, err := ex.Forward(1, Position{Step: 4, Sample: 6, Kept: rows}, feeds)
	if err != nil {
		t.Fatal(err)
	}
	if want := gatherRows(whole["d"], rows); !slices.Equal(part["d"].Data, want.Data) {
		t.Fatal("the kept rows' dropout masks differ from the whole pass's")
	}
}
