package stage

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/graphpipe/graphpipe/dag"
)

// OpTiming is one op's measured time per call, at each micro-batch size, of
// its three passes through an Executor: forward, the gradient for its inputs
// and the gradient for its weights.
type OpTiming struct {
	MicroBatch []int64
	Forward    []float64
	InputGrad  []float64
	WeightGrad []float64
}

// TimeOps times every op of g through a one-op Executor on the CPU backend at
// each micro-batch size, on the model's own synthetic data: a forward pass
// of the whole model at that size gives every op its real inputs. Ops alike
// (same kind, attributes and input shapes) are timed once and share the
// figures. Each pass is repeated until minTime has passed (at least three
// times) and the median is kept. progress, if not nil, is told each op timed.
func TimeOps(g *dag.Graph, sizes []int, minTime time.Duration, progress func(op string)) (map[string]*OpTiming, error) {
	if len(sizes) == 0 || !slices.IsSorted(sizes) || sizes[0] < 1 {
		return nil, fmt.Errorf("stage: micro-batch sizes must be positive and ascending, got %v", sizes)
	}
	all := make([]int, g.NumOps())
	for i := range all {
		all[i] = i
	}
	whole, err := NewExecutor(g, all, g.Seed())
	if err != nil {
		return nil, err
	}
	data, err := NewDataset(g)
	if err != nil {
		return nil, err
	}
	// one executor per kind of op, reused at every size
	rep := map[string]int{} // signature → the op timed for it
	single := map[int]*Executor{}
	for i := range all {
		sig := signature(g, i)
		if _, ok := rep[sig]; ok {
			continue
		}
		rep[sig] = i
		if single[i], err = NewExecutor(g, []int{i}, g.Seed()); err != nil {
			return nil, err
		}
	}
	timed := map[int]*OpTiming{}
	loss := g.Op(g.Loss()).Name
	for _, m := range sizes {
		vals, err := wholeForward(whole, data, m, loss)
		if err != nil {
			return nil, err
		}
		for _, i := range opsTimed(single) {
			f, bi, bw, err := timeOp(single[i], g, i, vals, m, minTime)
			if err != nil {
				return nil, fmt.Errorf("stage: timing op %q at micro-batch %d: %w", g.Op(i).Name, m, err)
			}
			t := timed[i]
			if t == nil {
				t = &OpTiming{}
				timed[i] = t
			}
			t.MicroBatch = append(t.MicroBatch, int64(m))
			t.Forward, t.InputGrad, t.WeightGrad = append(t.Forward, f), append(t.InputGrad, bi), append(t.WeightGrad, bw)
			if progress != nil {
				progress(fmt.Sprintf("%s at %d", g.Op(i).Name, m))
			}
		}
	}
	out := map[string]*OpTiming{}
	for i := range all {
		out[g.Op(i).Name] = timed[rep[signature(g, i)]]
	}
	return out, nil
}

// signature says which ops compute alike: kind, attributes, input shapes and
// types.
func signature(g *dag.Graph, i int) string {
	var b strings.Builder
	op := g.Op(i)
	fmt.Fprintf(&b, "%s|%+v", op.Kind, op.Attrs)
	for _, t := range g.OpInputs(i) {
		fmt.Fprintf(&b, "|%v:%v", t.Shape, t.DType)
	}
	return b.String()
}

func opsTimed(m map[int]*Executor) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

// wholeForward runs the whole model forward on a batch of m samples and
// returns every tensor it saw, model inputs and op outputs; the micro-batch
// is then released with a backward pass.
func wholeForward(ex *Executor, data *Dataset, m int, loss string) (map[string]*Value[float32], error) {
	feeds, err := data.Batch(0, m)
	if err != nil {
		return nil, err
	}
	outs, err := ex.Forward(0, feeds)
	if err != nil {
		return nil, err
	}
	vals := map[string]*Value[float32]{}
	for k, v := range feeds {
		vals[k] = v
	}
	for k, v := range outs {
		vals[k] = v
	}
	seed := map[string]*Value[float32]{loss: {Shape: []int{1}, Data: []float32{1}}}
	if _, err := ex.Backward(0, seed, true); err != nil {
		return nil, err
	}
	return vals, ex.ZeroGrads()
}

// timeOp times op i's passes in its one-op executor ex, fed from vals, with
// a gradient of ones' scale for its output, and returns each pass's median.
func timeOp(ex *Executor, g *dag.Graph, i int, vals map[string]*Value[float32], m int, minTime time.Duration) (f, bi, bw float64, err error) {
	feeds := map[string]*Value[float32]{}
	for _, t := range g.OpInputs(i) {
		feeds[t.Name] = vals[t.Name]
	}
	name := g.Op(i).Name
	var gy *Value[float32]
	if i == g.Loss() {
		gy = &Value[float32]{Shape: []int{1}, Data: []float32{1}}
	} else {
		y := vals[name]
		gy = NewValue[float32](y.Shape...)
		for j := range gy.Data {
			gy.Data[j] = float32(j%7-3) / 8
		}
	}
	grads := map[string]*Value[float32]{name: gy}
	var fs, bis, bws []float64
	spent := time.Duration(0)
	for r := -1; r < 3 || spent < minTime && r < 1000; r++ { // r = -1 warms up
		t0 := time.Now()
		if _, err := ex.Forward(r+1, feeds); err != nil {
			return 0, 0, 0, err
		}
		t1 := time.Now()
		if _, err := ex.Backward(r+1, grads, false); err != nil {
			return 0, 0, 0, err
		}
		t2 := time.Now()
		if err := ex.Weights(r + 1); err != nil {
			return 0, 0, 0, err
		}
		t3 := time.Now()
		if r >= 0 {
			fs, bis, bws = append(fs, t1.Sub(t0).Seconds()), append(bis, t2.Sub(t1).Seconds()), append(bws, t3.Sub(t2).Seconds())
			spent += t3.Sub(t0)
		}
	}
	if len(g.Params(i)) == 0 {
		bws = []float64{0}
	}
	return median(fs), median(bis), median(bws), ex.ZeroGrads()
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
