package stage

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

func countSteps(t *testing.T, tr *Trainer, dev *cuda.Device, steps int) []cuda.Counts {
	var out []cuda.Counts
	for s := 0; s < steps; s++ {
		before := dev.Counts()
		if _, _, err := tr.Step(s); err != nil {
			t.Fatal(err)
		}
		out = append(out, dev.Counts().Sub(before))
	}
	return out
}

func TestZZBeforeCounts(t *testing.T) {
	if os.Getenv("ZZ") == "" {
		t.Skip()
	}
	res := map[string]any{}
	for _, name := range []string{"mmt", "dlrm", "candle-uno", "case-study", "transformer", "mlp"} {
		g := small(t, name)
		tr, err := NewTrainer(g, TrainOptions{Optimizer: "adam", LR: 1e-3})
		if err != nil {
			t.Fatal(err)
		}
		dev := emulatedDevice(t)
		if err := tr.Ex.UseDevice(dev); err != nil {
			t.Fatal(err)
		}
		c := countSteps(t, tr, dev, 3)
		res[name+"-small"] = c[2]
		t.Logf("%s: %+v", name, c[2])
	}
	if data, err := os.ReadFile("/tmp/gpst/tt.json"); err == nil {
		g, err := dag.Load(data)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := NewTrainer(g, TrainOptions{Optimizer: "sgd", LR: 0.1, Momentum: 0.9, MicroBatch: 4})
		if err != nil {
			t.Fatal(err)
		}
		dev := emulatedDevice(t)
		if err := tr.Ex.UseDevice(dev); err != nil {
			t.Fatal(err)
		}
		c := countSteps(t, tr, dev, 3)
		res["two-tower-mb4"] = c[2]
		t.Logf("two-tower: %+v", c[2])
	}
	if os.Getenv("ZZMMT") != "" {
		e, _ := models.Lookup("mmt")
		cfg := e.Default
		cfg.Batch = 16
		g, err := e.Build(cfg)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := NewTrainer(g, TrainOptions{Optimizer: "sgd", LR: 1e-3})
		if err != nil {
			t.Fatal(err)
		}
		dev, _ := cuda.OpenDry()
		if err := tr.Ex.UseDevice(dev); err != nil {
			t.Fatal(err)
		}
		c := countSteps(t, tr, dev, 2)
		res["mmt-b16"] = c[1]
		t.Logf("mmt b16: %+v", c[1])
	}
	b, _ := json.MarshalIndent(res, "", " ")
	os.WriteFile("/tmp/gpst/after.json", b, 0o644)
}
