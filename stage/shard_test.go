package stage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
)

// ring is k replicas' StepComm in one process: what the runtime's ring
// does over the wire (a reduce-scatter leaving each replica its chunk of
// the sums, an all-gather of the chunks, the squared norms pooled from
// every replica's shard), met at a barrier, each sum taken in replica
// order. Every replica holds the same gradients here, so the sums are k
// times them.
type ring struct {
	k       int
	mu      sync.Mutex // guards everything below
	cond    *sync.Cond
	round   int
	arrived int
	vals    [][]*Value[float32]
	squares []map[string]float64
	flat    [][]float32 // the round's values laid end to end, by replica
}

func newRing(k int) *ring {
	r := &ring{k: k, vals: make([][]*Value[float32], k), squares: make([]map[string]float64, k), flat: make([][]float32, k)}
	r.cond = sync.NewCond(&r.mu)
	return r
}

// meet waits for every replica to hand its values; then f runs once, and
// each replica returns after it.
func (r *ring) meet(i int, vals []*Value[float32], squares map[string]float64, f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	round := r.round
	r.vals[i], r.squares[i] = vals, squares
	var flat []float32
	for _, v := range vals {
		flat = append(flat, v.Data...)
	}
	r.flat[i] = flat
	if r.arrived++; r.arrived == r.k {
		f()
		r.arrived, r.round = 0, r.round+1
		r.cond.Broadcast()
		return
	}
	for r.round == round {
		r.cond.Wait()
	}
}

// replica is replica i's view of the ring. dev, held by the replica's
// goroutine except while it waits in the ring, lets one replica at a time
// use its device: the CUDA emulator's kernels, one library in the
// process, are not made for several devices computing at once (a run's
// workers are processes of their own).
type replica struct {
	r   *ring
	i   int
	dev *sync.Mutex
}

// wait is meet with the device let go meanwhile.
func (p *replica) wait(vals []*Value[float32], squares map[string]float64, f func()) {
	p.dev.Unlock()
	defer p.dev.Lock()
	p.r.meet(p.i, vals, squares, f)
}

func (p *replica) Replicas() int { return p.r.k }

func (p *replica) AllReduce(context.Context, []*Value[float32]) error {
	return errors.New("a sharded stage reduce-scatters")
}

// ReduceScatter writes into every replica's chunk j the sum of chunk j
// over the replicas: each keeps its own (the rest it is left partial, as
// the runtime's ring leaves it).
func (p *replica) ReduceScatter(_ context.Context, grads []*Value[float32]) error {
	p.wait(grads, nil, func() {
		n := len(p.r.flat[0])
		for j := 0; j < p.r.k; j++ {
			lo, hi := Shard{j, p.r.k}.Span(n)
			sum := make([]float32, hi-lo)
			for rep := 0; rep < p.r.k; rep++ {
				for x := lo; x < hi; x++ {
					sum[x-lo] += p.r.flat[rep][x]
				}
			}
			write(p.r.vals[j], lo, sum)
		}
	})
	return nil
}

// AllGather copies chunk j of replica j's values to every replica.
func (p *replica) AllGather(_ context.Context, params []*Value[float32]) error {
	p.wait(params, nil, func() {
		n := len(p.r.flat[0])
		for j := 0; j < p.r.k; j++ {
			lo, hi := Shard{j, p.r.k}.Span(n)
			for rep := 0; rep < p.r.k; rep++ {
				write(p.r.vals[rep], lo, p.r.flat[j][lo:hi])
			}
		}
	})
	return nil
}

// PoolNorms sums each parameter's partial squares over the replicas, in
// replica order.
func (p *replica) PoolNorms(_ context.Context, squares map[string]float64) (float64, error) {
	p.wait(nil, squares, func() {
		all := map[string]float64{}
		for _, sq := range p.r.squares {
			for name, v := range sq {
				all[name] += v
			}
		}
		norm := GlobalNorm(all)
		p.r.squares = make([]map[string]float64, p.r.k)
		for rep := range p.r.squares {
			p.r.squares[rep] = map[string]float64{"": norm}
		}
	})
	p.r.mu.Lock()
	defer p.r.mu.Unlock()
	return p.r.squares[p.i][""], nil
}

// write copies data into vals laid end to end, from element lo.
func write(vals []*Value[float32], lo int, data []float32) {
	base := 0
	for _, v := range vals {
		a, b := max(lo, base), min(lo+len(data), base+len(v.Data))
		if a < b {
			copy(v.Data[a-base:b-base], data[a-lo:b-lo])
		}
		base += len(v.Data)
	}
}

// times is a replicated stage's StepComm for k replicas that hold the
// same gradients: their sum is k times them.
type times struct{ k float32 }

func (m times) AllReduce(_ context.Context, grads []*Value[float32]) error {
	for _, g := range grads {
		for i := range g.Data {
			g.Data[i] *= m.k
		}
	}
	return nil
}

func (times) PoolNorms(_ context.Context, squares map[string]float64) (float64, error) {
	return GlobalNorm(squares), nil
}

func TestShardedStepContract(t *testing.T) {
	for _, c := range backendCases() {
		t.Run(c.name, func(t *testing.T) {
			for _, opt := range []TrainOptions{
				{Optimizer: "adam", LR: 0.01, ClipGradNorm: 0.05, WeightDecay: 1e-2, MicroBatch: 2},
				{Optimizer: "sgd", LR: 0.05, Momentum: 0.9, ClipGradNorm: 1, MicroBatch: 4},
			} {
				t.Run(opt.Optimizer, func(t *testing.T) { shardedMatchesReplicated(t, c, opt) })
			}
		})
	}
}

// shardedMatchesReplicated: three replicas sharding Adam's (SGD's) state,
// stepping their shards on the same passes, end every step with the
// parameters of one executor that holds all of it and sums three copies
// of the gradients, within 1e-5; each holds a third of the state (about),
// and their states gathered are the one's.
func shardedMatchesReplicated(t *testing.T, c backendCase, o TrainOptions) {
	const k, steps = 3, 4
	ref := stepTrainer(t, c, o)
	reps := make([]*Trainer, k)
	r := newRing(k)
	for i := range reps {
		reps[i] = stepTrainer(t, c, o)
		if err := reps[i].Ex.ShardOptimizer(Shard{i, k}); err != nil {
			t.Fatal(err)
		}
	}
	for step := 0; step < steps; step++ {
		runPasses(t, ref, step)
		want, err := ref.Ex.EndStep(context.Background(), step, times{k})
		if err != nil {
			t.Fatal(err)
		}
		if err := ref.Ex.ApplyStep(false); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var dev sync.Mutex
		reports, errs := make([]StepReport, k), make([]error, k)
		for i, tr := range reps {
			runPasses(t, tr, step)
			wg.Add(1)
			go func() {
				defer wg.Done()
				dev.Lock()
				defer dev.Unlock()
				if reports[i], errs[i] = tr.Ex.EndStep(context.Background(), step, &replica{r: r, i: i, dev: &dev}); errs[i] == nil {
					errs[i] = tr.Ex.ApplyStep(false)
				}
			}()
		}
		wg.Wait()
		for i := range reps {
			if errs[i] != nil {
				t.Fatalf("replica %d step %d: %v", i, step, errs[i])
			}
			if g := reports[i].GradNorm; math.Abs(g-want.GradNorm) > 1e-5*want.GradNorm || reports[i].NonFinite != "" {
				t.Fatalf("replica %d step %d: norm %v (%q), one executor's %v", i, step, g, reports[i].NonFinite, want.GradNorm)
			}
		}
	}
	wantState := hostState(t, ref.Ex)
	for i, tr := range reps {
		got := hostState(t, tr.Ex)
		for name, w := range wantState {
			closeTo(t, fmt.Sprintf("replica %d %s", i, name), got[name].Data, w.Data, 1e-5)
		}
	}
	whole, n, err := ref.Ex.OptimizerState()
	if err != nil {
		t.Fatal(err)
	}
	parts := make([]map[string][]float32, k)
	for i, tr := range reps {
		st, m, err := tr.Ex.OptimizerState()
		if err != nil || m != n {
			t.Fatalf("replica %d: step %d, %v; want step %d", i, m, err, n)
		}
		if held, all := count(st), count(whole); float64(held) > 0.4*float64(all) {
			t.Errorf("replica %d holds %d of the state's %d values: over 0.4 of it", i, held, all)
		}
		parts[i] = st
	}
	gathered, err := reps[0].Ex.GatherOptimizerState(parts)
	if err != nil {
		t.Fatal(err)
	}
	if len(gathered) != len(whole) {
		t.Fatalf("gathered %d state tensors, the one executor holds %d", len(gathered), len(whole))
	}
	for slot, w := range whole {
		closeTo(t, "state "+slot, gathered[slot], w, 1e-4)
	}
}

func count(st map[string][]float32) int {
	n := 0
	for _, v := range st {
		n += len(v)
	}
	return n
}

// TestShardedLoadsWholeState: a sharded executor loads a whole stage's
// optimizer state (a checkpoint's, from any plan) as its shard's pieces,
// and gives back exactly those pieces; misuse is refused with a
// ShardError: sharding after a step, an index out of range, a sharded step
// without a StepComm that shards; and moving a sharded executor.
func TestShardedLoadsWholeState(t *testing.T) {
	o := TrainOptions{Optimizer: "adam", LR: 0.01, MicroBatch: 2}
	c := backendCases()[0]
	ref := stepTrainer(t, c, o)
	runPasses(t, ref, 0)
	if _, err := ref.Ex.EndStep(context.Background(), 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := ref.Ex.ApplyStep(false); err != nil {
		t.Fatal(err)
	}
	whole, n, _ := ref.Ex.OptimizerState()
	var se *ShardError
	if err := ref.Ex.ShardOptimizer(Shard{0, 2}); !errors.As(err, &se) {
		t.Errorf("sharding after a step: %v, want a ShardError", err)
	}
	parts := make([]map[string][]float32, 2)
	for i := range parts {
		tr := stepTrainer(t, c, o)
		if err := tr.Ex.ShardOptimizer(Shard{i, 5 - 3}); err != nil {
			t.Fatal(err)
		}
		if err := tr.Ex.LoadOptimizerState(whole, n); err != nil {
			t.Fatal(err)
		}
		st, m, err := tr.Ex.OptimizerState()
		if err != nil || m != n {
			t.Fatalf("shard %d: step %d, %v", i, m, err)
		}
		parts[i] = st
		if i == 1 {
			runPasses(t, tr, 1)
			if _, err := tr.Ex.EndStep(context.Background(), 1, nil); !errors.As(err, &se) {
				t.Errorf("a sharded step with no reduce-scatter: %v, want a ShardError", err)
			}
		}
	}
	back, err := ref.Ex.GatherOptimizerState(parts)
	if err != nil {
		t.Fatal(err)
	}
	for slot, w := range whole {
		closeTo(t, slot, back[slot], w, 0)
	}
	moved := stepTrainer(t, c, o)
	if err := moved.Ex.ShardOptimizer(Shard{0, 2}); err != nil {
		t.Fatal(err)
	}
	if err := moved.Ex.use(CPU()); err == nil {
		t.Error("a sharded executor moved to another backend, its shard's state loaded as a whole stage's")
	}
	for _, s := range []Shard{{2, 2}, {-1, 2}, {0, 0}} {
		if err := stepTrainer(t, c, o).Ex.ShardOptimizer(s); !errors.As(err, &se) {
			t.Errorf("shard %+v: %v, want a ShardError", s, err)
		}
	}
}

// TestOffloadedStepMatchesDevice: on the emulator, an executor whose
// optimizer is offloaded to the host (OffloadOptimizer: the gradients
// down, the CPU's fused step on the master weights, the weights up) ends 3
// steps of Adam with clipping and weight decay where one stepping on the
// device ends (the device's optimizer is the host's arithmetic), its
// state held on the host; on the CPU, offloading changes nothing.
func TestOffloadedStepMatchesDevice(t *testing.T) {
	emu := backendCases()[1]
	o := TrainOptions{Optimizer: "adam", LR: 0.01, ClipGradNorm: 0.05, WeightDecay: 1e-2, MicroBatch: 2}
	dev, off := stepTrainer(t, emu, o), stepTrainer(t, emu, o)
	if err := off.Ex.OffloadOptimizer(); err != nil || !off.Ex.Offloaded() {
		t.Fatalf("offload: %v (offloaded %v)", err, off.Ex.Offloaded())
	}
	for step := 0; step < 3; step++ {
		for _, tr := range []*Trainer{dev, off} {
			runPasses(t, tr, step)
			if _, err := tr.Ex.EndStep(context.Background(), step, nil); err != nil {
				t.Fatal(err)
			}
			if err := tr.Ex.ApplyStep(false); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := hostState(t, dev.Ex)
	for name, v := range hostState(t, off.Ex) {
		closeTo(t, name, v.Data, want[name].Data, 1e-6)
	}
	if m := off.Ex.Memory(); m.OptimizerStateBytes != 2*m.ParameterBytes {
		t.Errorf("offloaded Adam holds %d bytes of state for %d bytes of parameters, want twice", m.OptimizerStateBytes, m.ParameterBytes)
	}
	cpu := stepTrainer(t, backendCases()[0], o)
	if err := cpu.Ex.OffloadOptimizer(); err != nil || cpu.Ex.Offloaded() {
		t.Errorf("on the CPU: %v, offloaded %v; want nothing done", err, cpu.Ex.Offloaded())
	}
}
