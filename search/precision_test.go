package search

import (
	"errors"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
)

// zooModel is a zoo model at its default size.
func zooModel(t *testing.T, name string) *dag.Graph {
	t.Helper()
	e, err := models.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.Build(e.Default)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestPrecisionPlans: the sequential transformer on 8 h100 plans faster in
// tf32 than fp32, and faster still in bf16; a bf16 plan says so, prices
// its stage edges at 2 bytes a float element, and holds a bf16 copy of
// every weight beside its float32 state.
func TestPrecisionPlans(t *testing.T) {
	t.Parallel()
	g := zooModel(t, "transformer")
	var iter []float64
	for _, prec := range []string{"fp32", "tf32", "bf16"} {
		p, err := Search(g, Options{Device: plan.Profiles["h100"], Devices: 8, DevicesPerNode: 8, Precision: prec})
		if err != nil {
			t.Fatal(err)
		}
		iter = append(iter, p.Predicted.IterationS)
		if p.PrecisionName() != prec || (prec == "fp32") != (p.Precision == "") {
			t.Errorf("%s: the plan says %q", prec, p.Precision)
		}
		for _, e := range p.Edges {
			var want int64
			for _, name := range e.Tensors {
				i, _ := g.OpIndex(name)
				want += g.Out(i).Shape.Elems() * plan.ActivationBytes(prec)
			}
			if e.Bytes != want {
				t.Errorf("%s: edge %d→%d carries %d bytes a sample, want %d", prec, e.From, e.To, e.Bytes, want)
			}
		}
	}
	if !(iter[2] < iter[1] && iter[1] < iter[0]) {
		t.Errorf("iteration fp32 %.4g s, tf32 %.4g, bf16 %.4g: want each faster than the one before", iter[0], iter[1], iter[2])
	}
	for _, tc := range []struct {
		prec string
		per  int64
	}{{"fp32", 16}, {"tf32", 16}, {"bf16", 18}} {
		o, err := Options{Device: plan.Profiles["h100"], Devices: 8, Precision: tc.prec}.withDefaults(g.BatchSize())
		if err != nil {
			t.Fatal(err)
		}
		if got := newCostModel(g, &o).static(1000); got != 1000*tc.per {
			t.Errorf("%s: 1000 parameters hold %d bytes (Adam), want %d", tc.prec, got, 1000*tc.per)
		}
	}
}

// TestPrecisionRefused: a precision a device (or a cluster's kind) has no
// rate for, and one that is none, are the --precision option's fault.
func TestPrecisionRefused(t *testing.T) {
	t.Parallel()
	g := zooModel(t, "mmt")
	cluster := &plan.Cluster{Kinds: []plan.Kind{{Device: plan.Profiles["h100"], Devices: 4, DevicesPerNode: 4}, {Device: plan.Profiles["v100"], Devices: 4, DevicesPerNode: 4}}}
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Device: plan.Profiles["v100"], Devices: 8, Precision: "bf16"}, "--precision: device v100 has no bf16 rate (it has fp32)"},
		{Options{Cluster: cluster, Precision: "tf32"}, "--precision: device v100 has no tf32 rate (it has fp32)"},
		{Options{Device: plan.Profiles["h100"], Devices: 8, Precision: "fp16"}, `--precision: unknown precision "fp16" (known: fp32, tf32, bf16)`},
	} {
		_, err := Search(g, tc.o)
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Flag != "precision" || err.Error() != tc.want {
			t.Errorf("%v", err)
		}
	}
}

// TestFusedAttentionPriced: with attention fused the plan says so, an
// attention op keeps none of its probabilities (its stash shrinks by
// them, a float32 log-sum-exp a row in their place), and its scores' FLOPs
// are priced on the CUDA cores, slower than the tensor cores' GEMMs in
// bf16.
func TestFusedAttentionPriced(t *testing.T) {
	t.Parallel()
	g := zooModel(t, "transformer")
	attn := -1
	for i := 0; i < g.NumOps(); i++ {
		if g.Cost(i).ScoreFLOPs > 0 {
			attn = i
			break
		}
	}
	if attn < 0 {
		t.Fatal("no attention op")
	}
	cms := map[string]*costModel{}
	for _, a := range []string{"unfused", "fused"} {
		o, err := Options{Device: plan.Profiles["h100"], Devices: 8, Precision: "bf16", Attention: a}.withDefaults(g.BatchSize())
		if err != nil {
			t.Fatal(err)
		}
		cms[a] = newCostModel(g, &o)
	}
	c := g.Cost(attn)
	heads, s := int64(g.Op(attn).Attrs.Heads), g.OpInputs(attn)[0].Shape[0]
	if got, want := cms["fused"].stashBytes(attn), (c.StashBytes-c.ScoreBytes)/2+4*heads*s; got != want {
		t.Errorf("fused stash %d bytes a sample, want %d", got, want)
	}
	if u, f := cms["unfused"].stashBytes(attn), cms["fused"].stashBytes(attn); f >= u {
		t.Errorf("fused stash %d, unfused %d: want less", f, u)
	}
	if u, f := cms["unfused"].opTime(attn, 16), cms["fused"].opTime(attn, 16); !(f.f > u.f && f.bi > u.bi) {
		t.Errorf("fused %+v, unfused %+v: the scores on the CUDA cores should take longer", f, u)
	}
	p, err := Search(g, Options{Device: plan.Profiles["h100"], Devices: 8, Precision: "bf16", Attention: "fused"})
	if err != nil || p.AttentionName() != "fused" {
		t.Fatalf("search: %v, attention %q", err, p.Attention)
	}
	if _, err := Search(g, Options{Device: plan.Profiles["h100"], Devices: 8, Attention: "flash"}); err == nil {
		t.Error("attention flash accepted")
	}
}
