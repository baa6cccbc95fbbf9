package search

import (
	"fmt"
	"math"
	"testing"

	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
)

// TestRunCostsPricing: a tiny plan, an MLP cut in two stages on two CPU
// workers of one host, at one micro-batch per iteration, priced with a
// profile whose run costs are round numbers and op times of one value per
// op (and per input made), against the arithmetic done by hand: every op
// slowed by the workers' share of the cores, each stage beginning once the
// coordinator's go reached it and it made the inputs it reads, the edge over NATS at its latency and bandwidth, a
// message's cost at either end, the iteration's fixed cost, the DP's
// period with its stage's messages, and the iteration the simulator gives,
// written out step by step.
func TestRunCostsPricing(t *testing.T) {
	e, err := models.Lookup("mlp")
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.Small
	cfg.Layers, cfg.Hidden, cfg.Input, cfg.Classes, cfg.Batch = 2, 8, 4, 2, 4
	g, err := e.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const f, bi, bw = 100e-6, 60e-6, 40e-6 // every op, at every micro-batch
	ot := &plan.OpTimes{Format: plan.OpTimesFormat, Model: g.Name(), SHA256: plan.OpsHash(g), Device: "by hand", Ops: map[string]plan.OpSeries{}}
	for i := 0; i < g.NumOps(); i++ {
		ot.Ops[g.Op(i).Name] = plan.OpSeries{MicroBatch: []int64{1, 4}, Forward: []float64{f, f}, InputGrad: []float64{bi, bi}, WeightGrad: []float64{bw, bw}}
	}
	// making the inputs: 40 µs for the features and 1 ms for the labels
	// (what the loss reads) of 8 samples, measured at twice the batch
	// planned
	ot.Inputs, ot.InputBatch = map[string]float64{}, 8
	for _, in := range g.Inputs() {
		ot.Inputs[in.Name] = 40e-6
	}
	for _, t := range g.OpInputs(g.Loss()) {
		if t.Producer < 0 {
			ot.Inputs[t.Name] = 1e-3
		}
	}
	dev := plan.Profiles["cpu"]
	dev.Name = "cpu (measured)"
	dev.RunCosts = plan.RunCosts{NATSLat: 50e-6, NATSBW: 1e8, SendS: 10e-6, SendBW: 1e9, RecvS: 5e-6, RecvBW: 2e9,
		ReportS: 200e-6, ReportWorkerS: 30e-6, GoS: 20e-6, GoWorkerS: 70e-6, RingLat: 1e-3, RingBW: 1e7, HostCores: 2, CoreSlowdown: plan.NewSlowdowns(1.25, 1.25, 1.25)}
	o, err := Options{Device: dev, Devices: 2, DevicesPerNode: 4, Batch: 4, MicroBatch: 4, OpTimes: ot, Schedule: "1f1b", Recompute: "off"}.withDefaults(g.BatchSize())
	if err != nil {
		t.Fatal(err)
	}
	cm := newCostModel(g, &o)
	half := g.NumOps() / 2
	var in []stageIn
	for _, ops := range [][]int{seq(0, half), seq(half, g.NumOps())} {
		blk := cm.newBlock(ops, cm.boundary)
		in = append(in, stageIn{ops: ops, k: 1, cost: cm.priceOps(ops, blk, 1, 4, 1), blk: blk})
	}
	p, err := assemble(g, &o, cm, 4, in, true)
	if err != nil {
		t.Fatal(err)
	}

	const slow = 1.25 // the host's workers, however many are busy at once
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-12*math.Max(1, math.Abs(want)) {
			t.Errorf("%s: %.9g, want %.9g", what, got, want)
		}
	}
	var fwd, bwd, flush, begin [2]float64
	for s, st := range p.Stages {
		begin[s] = 20e-6 + float64(s)*70e-6 // the go reaches worker s
		for _, name := range modelInputs(g, in[s].ops) {
			begin[s] += slow * ot.Inputs[name] * 4 / 8
		}
		near("stage begin", st.BeginS, begin[s])
		n := float64(len(in[s].ops))
		fwd[s], bwd[s] = slow*n*f, slow*n*(bi+bw)
		flush[s] = slow * float64(st.Params) * float64(8+2*8) / dev.MemBW // Adam's state; one replica: no all-reduce
		near("stage forward", st.ForwardS, fwd[s])
		near("stage backward", st.BackwardS, bwd[s])
		near("stage flush", st.FlushS, flush[s])
	}
	if len(p.Edges) != 1 {
		t.Fatalf("%d edges, want 1", len(p.Edges))
	}
	e0 := p.Edges[0]
	bytes := float64(e0.Bytes * 4)
	T, S, R := 50e-6+bytes/1e8, 10e-6+bytes/1e9, 5e-6+bytes/2e9
	if e0.Transport != plan.TransportNATS || e0.Inter {
		t.Errorf("edge over %q, inter-node %v; want nats inside the node", e0.Transport, e0.Inter)
	}
	near("transfer", e0.Transfer, T)
	near("send", e0.SendS, S)
	near("receive", e0.RecvS, R)
	near("fixed cost", p.FixedS, 200e-6+2*30e-6)
	near("slowdown", p.Slowdown, slow)

	// the DP's period of stage 0: its work, its flush over the one
	// micro-batch, and its boundary's messages (it sends its largest
	// output's activations and takes their gradients)
	out := float64(in[0].blk.outB * 4)
	period := fwd[0] + bwd[0] + flush[0] + (10e-6 + out/1e9) + (5e-6 + out/2e9)
	near("stage 0's period", in[0].cost.period, period)

	// one micro-batch under 1F1B: each stage first waits for the go and
	// makes its inputs;
	// stage 0 forwards and sends (busy for the send call); stage 1 takes
	// the activations when they land, or when it has made its labels and
	// taken them if that is later, runs forward and backward and sends the
	// gradients back; stage 0 takes them when they land, runs its
	// backward, flushes
	if !(begin[1]+R > begin[0]+fwd[0]+T) {
		t.Fatalf("the labels (%g s) do not delay stage 1 past the activations' landing (%g s): the oracle would not see Begin and Take", begin[1], begin[0]+fwd[0]+T)
	}
	land := begin[0] + fwd[0] + T
	sent := math.Max(begin[1]+R, land) + fwd[1] + bwd[1]
	end1 := sent + S + flush[1]
	end0 := math.Max(begin[0]+fwd[0]+S+R, sent+T) + bwd[0] + flush[0]
	near("iteration", p.Predicted.IterationS, math.Max(end0, end1)+p.FixedS)
}

func seq(lo, hi int) []int {
	var out []int
	for i := lo; i < hi; i++ {
		out = append(out, i)
	}
	return out
}

// TestShareCoresSettles: on a profile whose slowdown grows with the
// workers busy at once, the zoo's small presets planned for 2 and 3 CPU
// workers come out priced, stage by stage, at the slowdown their passes
// meet in their own simulated iteration: the fixed point shareCores looks
// for, within a few percent, against an oracle that samples the timeline
// at evenly spaced moments (contention sweeps its events); and never above
// the DP's every-worker-busy price.
func TestShareCoresSettles(t *testing.T) {
	dev := plan.Profiles["cpu"]
	dev.Name = "cpu (measured)"
	dev.RunCosts = plan.RunCosts{NATSLat: 50e-6, NATSBW: 2e8, SendS: 10e-6, RecvS: 5e-6, ReportS: 1e-4, GoWorkerS: 5e-5, HostCores: 2,
		CoreSlowdown: plan.NewSlowdowns(1, 1.1, 1.6, 2.2)}
	for _, name := range []string{"mmt", "dlrm", "candle-uno"} {
		e, _ := models.Lookup(name)
		g, err := e.Build(e.Small)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/%d", name, d), func(t *testing.T) {
				p, err := Search(g, Options{Device: dev, Devices: d})
				if err != nil {
					t.Fatal(err)
				}
				res, err := p.Simulate()
				if err != nil {
					t.Fatal(err)
				}
				want := sampledContention(p, res, dev, d)
				for s, st := range p.Stages {
					if math.Abs(st.Slowdown-want[s]) > 0.05*want[s] || st.Slowdown > dev.Slowdown(d)+1e-12 {
						t.Errorf("stage %d priced at ×%.4g, its passes meet ×%.4g (all %d busy: ×%.4g)", s, st.Slowdown, want[s], d, dev.Slowdown(d))
					}
				}
			})
		}
	}
}

// sampledContention is contention's oracle for a plan of workers workers
// on one host: at 20000 evenly spaced moments of the iteration, each stage
// computing then meets dev.Slowdown of the workers computing then (at
// least min(workers, host cores)); a stage's factor is its moments' mean.
func sampledContention(p *plan.Plan, res *microbatch.Result, dev plan.Device, workers int) []float64 {
	const n = 20000
	sum, cnt := make([]float64, len(p.Stages)), make([]float64, len(p.Stages))
	for i := 0; i < n; i++ {
		t := (float64(i) + 0.5) / n * res.Iteration
		busy := make([]bool, len(p.Stages))
		for _, e := range res.Events {
			if e.Compute() && e.Start <= t && t < e.End {
				busy[e.Stage] = true
			}
		}
		k := 0
		for s, b := range busy {
			if b {
				k += len(p.Stages[s].Devices)
			}
		}
		for s, b := range busy {
			if b {
				sum[s] += dev.Slowdown(max(k, min(workers, dev.HostCores)))
				cnt[s]++
			}
		}
	}
	for s := range sum {
		if cnt[s] == 0 {
			sum[s], cnt[s] = 1, 1
		}
		sum[s] /= cnt[s]
	}
	return sum
}
