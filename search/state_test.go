package search

import (
	"errors"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
)

// gpt is the GPT-shaped transformers: 13b (40 layers, hidden 5120,
// 12.8B parameters, batch 256) and 6b (32 layers, hidden 4096, 6.6B,
// batch 512), and GPT-3's 175b (96 layers, hidden 12288, batch 512),
// sequence 2048, vocabulary 32000.
func gpt(t *testing.T, size string) *dag.Graph {
	t.Helper()
	knobs := map[string]int64{"layers": 32, "hidden": 4096, "ffn": 16384, "seq": 2048, "heads": 32, "vocab": 32000, "batch": 512}
	switch size {
	case "13b":
		knobs = map[string]int64{"layers": 40, "hidden": 5120, "ffn": 20480, "seq": 2048, "heads": 40, "vocab": 32000, "batch": 256}
	case "175b":
		knobs = map[string]int64{"layers": 96, "hidden": 12288, "ffn": 49152, "seq": 2048, "heads": 96, "vocab": 32000, "batch": 512}
	}
	return zoo(t, "transformer", knobs)
}

// TestPlacementPrices: what each placement of a stage's optimizer state
// costs, by hand: a stage of 1000 parameters in bf16 with Adam (8 bytes of
// state a parameter), on 4 devices of one node.
func TestPlacementPrices(t *testing.T) {
	dev := plan.Profiles["h100"]
	dev.HostBW, dev.HostMemBW = 20e9, 50e9
	o, err := Options{Device: dev, Devices: 4, Precision: "bf16", Batch: 8}.withDefaults(8)
	if err != nil {
		t.Fatal(err)
	}
	cm := newCostModel(zoo(t, "mlp", nil), &o)
	blk := &block{params: 1000, maxParams: 600}
	ar := 1e-3 // the all-reduce, whatever it is
	for _, c := range []struct {
		pl     placement
		k      int
		static int64
		flush  float64
		host   int64
	}{
		{placeReplicated, 4, 1000 * (8 + 8 + 2), ar + 1000*(8+16+4)/dev.MemBW, 0},
		// 1/4 of the state, the update on 1/4 of the parameters
		{placeSharded, 4, 1000*(8+2) + 250*8, ar + 250*(8+16+4)/dev.MemBW, 0},
		// the state on the host: gradients down, weights up (8 bytes a
		// parameter), the update at the host's memory bandwidth shared
		// by the node's 4 devices
		{placeHost, 4, 1000 * (8 + 2), ar + 8000/20e9 + 1000*(12+16)*4/50e9, 8000},
		// two of its ops' bf16 weights and float32 gradients; the host
		// makes the bf16 copy; 2 micro-batches, each bringing the
		// weights twice and taking the gradients once
		{placeStreamed, 1, 2 * 600 * (2 + 4), ar + 1000*(12+16+2)*4/50e9, 2 * 1000 * (2*2 + 4)},
	} {
		if got := cm.placedStatic(c.pl, blk, c.k); got != c.static {
			t.Errorf("%s on %d: static %d bytes, want %d", c.pl.name(), c.k, got, c.static)
		}
		if got := cm.placedFlush(c.pl, blk.params, c.k, ar, 1); !close(got, c.flush) {
			t.Errorf("%s on %d: flush %v s, want %v", c.pl.name(), c.k, got, c.flush)
		}
		if got := cm.hostBytes(c.pl, blk.params, 2); got != c.host {
			t.Errorf("%s on %d: %d bytes over the host link, want %d", c.pl.name(), c.k, got, c.host)
		}
	}
	// streamed: a pass takes its compute or its copies, whichever is longer
	f, bi, bw := cm.streamTimes(1000, 1, 0.5, 0.5)
	if f != 1 || bi != 0.5 || bw != 0.5 {
		t.Errorf("compute-bound stream: %v %v %v, want the compute's", f, bi, bw)
	}
	// copy-bound: the forward brings the bf16 weights; the backward brings
	// them again while the gradients go out, and the host adds those to
	// the iteration's (12 bytes a parameter at its memory bandwidth), the
	// longest of the three
	f, bi, bw = cm.streamTimes(1000, 0, 1e-9, 1e-9)
	if in, back := 1000*2/20e9, max(4000/20e9, 12000/50e9); !close(f, in) || !close(bi+bw, back) || !close(bi, bw) {
		t.Errorf("copy-bound stream: forward %v, backward %v + %v; want %v and %v in halves", f, bi, bw, in, back)
	}
}

// TestOptimizerStateOption: --optimizer-state takes auto, replicated,
// sharded or host, and nothing else.
func TestOptimizerStateOption(t *testing.T) {
	for _, s := range []string{"", "auto", "replicated", "sharded", "host"} {
		if _, err := (Options{Device: plan.Profiles["cpu"], Devices: 2, OptimizerState: s}).withDefaults(8); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	_, err := (Options{Device: plan.Profiles["cpu"], Devices: 2, OptimizerState: "zero3"}).withDefaults(8)
	var oe *OptionError
	if !errors.As(err, &oe) || oe.Flag != "optimizer-state" {
		t.Errorf("zero3: got %v, want an OptionError for --optimizer-state", err)
	}
}

// TestHostPlansWhatReplicatedRefuses: the 12.8B model on one h100
// in bf16 is refused with its state on the device; with auto the search
// finds a plan whose stage keeps its state in host memory and streams its
// weights; where streaming is not allowed (a run), it is refused again,
// the weights and gradients alone being over the device's memory.
func TestHostPlansWhatReplicatedRefuses(t *testing.T) {
	g := gpt(t, "13b")
	o := Options{Device: plan.Profiles["h100"], Devices: 1, Precision: "bf16", OptimizerState: plan.StateReplicated}
	var np *NoPlanError
	if _, err := Search(g, o); !errors.As(err, &np) || !np.Bound {
		t.Fatalf("replicated: got %v, want a refusal", err)
	}
	o.OptimizerState = ""
	p, err := Search(g, o)
	if err != nil {
		t.Fatal(err)
	}
	st := p.Stages[0]
	if len(p.Stages) != 1 || st.StateName() != plan.StateHost || !st.StreamWeights || !p.Predicted.Feasible || p.Predicted.PeakMemory > p.MemoryLimit {
		t.Fatalf("auto: %d stages, stage 0 %s (streams %v), peak %d of %d", len(p.Stages), st.StateName(), st.StreamWeights, p.Predicted.PeakMemory, p.MemoryLimit)
	}
	if st.HostCopyBytes <= 0 || st.StateSavedBytes <= 0 {
		t.Errorf("host copies %d bytes, saved %d bytes: want both priced", st.HostCopyBytes, st.StateSavedBytes)
	}
	t.Logf("auto: micro-batch %d, %.4g samples/s, peak %.3g GB, %.3g GB over the host link per iteration", p.MicroBatch, p.Predicted.SamplesPerS, float64(p.Predicted.PeakMemory)/1e9, float64(st.HostCopyBytes)/1e9)
	o.NoStreaming = true
	if q, err := Search(g, o); !errors.As(err, &np) {
		t.Fatalf("without streaming: got a plan (streams %v), want a refusal", q.Streams())
	}
}

// TestShardedNoSlowerThanReplicated: the 6.6B model on 64 h100
// with auto shards some stage and predicts at least the samples/s of
// every replica holding all of its state; and sharding alone does too.
func TestShardedNoSlowerThanReplicated(t *testing.T) {
	g := gpt(t, "6b")
	o := Options{Device: plan.Profiles["h100"], Devices: 64}
	base := o
	base.OptimizerState = plan.StateReplicated
	rep, err := Search(g, base)
	if err != nil {
		t.Fatal(err)
	}
	for _, state := range []string{StateAuto, plan.StateSharded} {
		o.OptimizerState = state
		p, err := Search(g, o)
		if err != nil {
			t.Fatal(err)
		}
		sharded := 0
		for _, st := range p.Stages {
			if st.StateName() == plan.StateSharded {
				sharded++
			}
		}
		if sharded == 0 || p.Predicted.SamplesPerS < rep.Predicted.SamplesPerS {
			t.Errorf("%s: %d of %d stages sharded, %.4g samples/s against replicated's %.4g", state, sharded, len(p.Stages), p.Predicted.SamplesPerS, rep.Predicted.SamplesPerS)
		}
		t.Logf("%s: %d stages (%d sharded), micro-batch %d, %.4g samples/s, peak %.3g GB; replicated: %d stages, micro-batch %d, %.4g samples/s, peak %.3g GB",
			state, len(p.Stages), sharded, p.MicroBatch, p.Predicted.SamplesPerS, float64(p.Predicted.PeakMemory)/1e9,
			len(rep.Stages), rep.MicroBatch, rep.Predicted.SamplesPerS, float64(rep.Predicted.PeakMemory)/1e9)
	}
}

// TestHostEveryStage: --optimizer-state host puts every stage's state in
// host memory (streaming none where the weights fit), and replicated none.
func TestHostEveryStage(t *testing.T) {
	g := zoo(t, "mmt", nil)
	for _, c := range []struct {
		state string
		want  string
	}{{plan.StateHost, plan.StateHost}, {plan.StateReplicated, plan.StateReplicated}} {
		p, err := Search(g, Options{Device: plan.Profiles["v100"], Devices: 8, OptimizerState: c.state})
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range p.Stages {
			if st.StateName() != c.want || st.StreamWeights {
				t.Errorf("%s: stage %d on %d devices: %s (streams %v)", c.state, st.ID, len(st.Devices), st.StateName(), st.StreamWeights)
			}
		}
	}
}

// TestAutoSpillsWhereOnlySpillingFits: GPT-3's shape (175B) on 8 h100 in
// bf16, where no stage of any split fits its weights and gradients alone,
// plans under auto, every stage spilled and streaming: the DP's bounds that
// ignore depth (which stage fits one micro-batch in flight at T) count the
// spilled variant too, not the device placement alone.
func TestAutoSpillsWhereOnlySpillingFits(t *testing.T) {
	g := gpt(t, "175b")
	p, err := Search(g, Options{Device: plan.Profiles["h100"], Devices: 8, DevicesPerNode: 8, Precision: "bf16"})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range p.Stages {
		if st.StateName() != plan.StateHost || !st.StreamWeights {
			t.Errorf("stage %d: %s (streams %v), want its state in host memory and its weights streamed", st.ID, st.StateName(), st.StreamWeights)
		}
	}
	t.Logf("%d stages, micro-batch %d, %.4g samples/s, peak %.3g GB", len(p.Stages), p.MicroBatch, p.Predicted.SamplesPerS, float64(p.Predicted.PeakMemory)/1e9)
}
