package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/tensor"
)

func TestTrainDump(t *testing.T) {
	model := smallModel(t, "mmt")
	dir := filepath.Join(t.TempDir(), "dump")
	code, out, errs := gp(t, "", "train", model, "--steps", "6", "--optimizer", "sgd", "--lr", "0.05", "--micro-batch", "4", "--dump", dir, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var sum trainSummary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatal(err)
	}
	if len(sum.Losses) != 6 || !(sum.FinalLoss < sum.FirstLoss) || sum.Batch != 16 {
		t.Errorf("summary %+v", sum)
	}
	read := func(name string) map[string]tensor.Named {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		entries, _, err := tensor.DecodeSafetensors(b)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]tensor.Named{}
		for _, e := range entries {
			m[e.Name] = e
		}
		return m
	}
	init, final, data := read("init.safetensors"), read("final.safetensors"), read("data.safetensors")
	w, ok := init["b0.l0.attn.in_proj_weight"]
	if !ok || len(w.Shape) != 2 || w.Shape[0] != 96 || w.Shape[1] != 32 {
		t.Fatalf("init lacks b0.l0.attn.in_proj_weight [96 32]: %+v", w.Shape)
	}
	if final["head.weight"].F32[0] == init["head.weight"].F32[0] {
		t.Error("final parameters equal the initial ones")
	}
	tok, ok := data["5/b0.tokens"]
	if !ok || tok.I32 == nil || tok.Shape[0] != 16 || tok.Shape[1] != 8 {
		t.Fatalf("data lacks 5/b0.tokens as I32 [16 8]: %+v", tok.Shape)
	}
	if _, ok := data["0/label"]; !ok {
		t.Error("data lacks the labels")
	}
	var losses []float64
	b, _ := os.ReadFile(filepath.Join(dir, "losses.json"))
	if json.Unmarshal(b, &losses) != nil || len(losses) != 6 || losses[0] != float64(sum.FirstLoss) {
		t.Errorf("losses.json: %v", losses)
	}
}

func TestTrainRefusals(t *testing.T) {
	model := smallModel(t, "mlp")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"train", model, "--micro-batch", "5"}, "--micro-batch: 5 does not divide the batch of 32"},
		{[]string{"train", model, "--optimizer", "lion"}, `unknown optimizer "lion"`},
		{[]string{"train", model, "--lr", "-1"}, "--lr: must be a positive number"},
		{[]string{"train", model, "--steps", "0"}, "--steps: must be positive"},
		{[]string{"train", model, "--batch", "1099511627776"}, "--batch: training mlp at batch 1099511627776, micro-batch 1099511627776, in one process needs about"},
	} {
		code, _, errs := gp(t, "", tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, %q; want exit 2 and %q", tc.args[2:], code, errs, tc.want)
		}
	}
}
