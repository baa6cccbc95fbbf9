package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/profile"
	"github.com/graphpipe/graphpipe/search"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// beforeFile holds what a step asked of the device before the training
// state moved to it (profile's test data, counted on main at b142347).
const beforeFile = "profile/testdata/device-calls-before.json"

// DeviceCallsSection counts what one steady-state training step asks of a
// GPU's driver on the CUDA code path: the zoo's small presets on the
// emulator (which counts what a GPU is asked), each the third step of
// stage.Trainer with Adam and the whole batch one micro-batch, beside the
// same step's counts before the state lived on the device; and, unless
// quick, the paper's MMT at batch 16 on a dry device (which counts and
// computes nothing), its step priced on the h100 profile.
func DeviceCallsSection(c Config) (*Section, error) {
	s := &Section{Name: "device-calls", Title: "What a training step asks of a GPU (the CUDA path, counted on the emulator)",
		Intro: "One steady-state step (the third) of `graphpipe train MODEL --backend cuda-emulator` (stage.Trainer, Adam, the whole batch " +
			"one micro-batch) as the device counts it above the driver (tensor/cuda's Counts: the emulator counts what a GPU is asked). " +
			"Waits are the host's waits for the device; bytes cross between host and device; pageable copies are from Go memory (the driver " +
			"stages them and waits), the others through pinned staging buffers. \"Before\" is the same step on main at b142347, before the " +
			"parameters, gradients and optimizer state moved to the device (" + beforeFile + ").",
		Columns: []string{"model", "parameters", "waits", "before", "bytes up", "bytes down", "before (both ways)", "pageable copies", "before",
			"launches", "GEMMs", "memsets", "allocations"}}
	var before struct{ Steps map[string]cuda.Counts }
	if b, err := os.ReadFile(filepath.FromSlash(beforeFile)); err == nil {
		if err := json.Unmarshal(b, &before); err != nil {
			return nil, fmt.Errorf("%s: %w", beforeFile, err)
		}
	}
	lib, err := cuda.EmulatorLibrary()
	if errors.Is(err, cuda.ErrNoCompiler) {
		s.Notes = append(s.Notes, fmt.Sprintf("Not measured: %v.", err))
		return s, nil
	} else if err != nil {
		return nil, err
	}
	for _, name := range []string{"mmt", "dlrm", "candle-uno", "case-study", "transformer", "mlp"} {
		c.Log("device calls: %s", name)
		e, err := models.Lookup(name)
		if err != nil {
			return nil, err
		}
		g, err := e.Build(e.Small)
		if err != nil {
			return nil, err
		}
		dev, err := cuda.OpenEmulator(lib)
		if err != nil {
			return nil, err
		}
		n, err := stepCounts(g, dev, stage.TrainOptions{Optimizer: "adam", LR: 1e-3}, 3)
		dev.Close()
		if err != nil {
			return nil, err
		}
		was, ok := before.Steps[name+"-small"]
		old := func(v int64) string {
			if !ok {
				return "-"
			}
			return fmt.Sprint(v)
		}
		s.Rows = append(s.Rows, []string{name + " (small)", fmt.Sprint(paramCount(g)), fmt.Sprint(n.Syncs), old(was.Syncs),
			fmt.Sprint(n.H2DBytes), fmt.Sprint(n.D2HBytes), old(was.H2DBytes + was.D2HBytes), fmt.Sprint(n.PageableCopies), old(was.PageableCopies),
			fmt.Sprint(n.Launches), fmt.Sprint(n.GEMMs), fmt.Sprint(n.Memsets), fmt.Sprint(n.Allocs + n.HostAllocs)})
	}
	if !c.Quick {
		note, err := paperMMTCalls(c, before.Steps["mmt-b16"])
		if err != nil {
			return nil, err
		}
		s.Notes = append(s.Notes, note)
	}
	return s, nil
}

// stepCounts trains g on dev with o and returns what step steps−1 asked.
func stepCounts(g *dag.Graph, dev *cuda.Device, o stage.TrainOptions, steps int) (cuda.Counts, error) {
	tr, err := stage.NewTrainer(g, o)
	if err != nil {
		return cuda.Counts{}, err
	}
	defer tr.Ex.Close()
	if err := tr.Ex.UseDevice(dev); err != nil {
		return cuda.Counts{}, err
	}
	var last cuda.Counts
	for s := 0; s < steps; s++ {
		at := dev.Counts()
		if _, _, err := tr.Step(s); err != nil {
			return cuda.Counts{}, err
		}
		last = dev.Counts().Sub(at)
	}
	return last, nil
}

func paramCount(g *dag.Graph) int64 {
	var n int64
	for i := 0; i < g.NumOps(); i++ {
		for _, p := range g.Params(i) {
			k := int64(1)
			for _, d := range p.Shape {
				k *= d
			}
			n += k
		}
	}
	return n
}

// paperMMTCalls counts the second step of the paper's MMT at batch 16 on a
// dry device and prices it, and the recorded step from before, on the
// h100 profile on top of the plan's prediction.
func paperMMTCalls(c Config, was cuda.Counts) (string, error) {
	c.Log("device calls: the paper's mmt at batch 16, dry")
	e, err := models.Lookup("mmt")
	if err != nil {
		return "", err
	}
	cfg := e.Default
	cfg.Batch = 16
	g, err := e.Build(cfg)
	if err != nil {
		return "", err
	}
	h100 := plan.Profiles["h100"]
	p, err := search.Search(g, search.Options{Device: h100, Devices: 1})
	if err != nil {
		return "", err
	}
	dev, err := cuda.OpenDry()
	if err != nil {
		return "", err
	}
	defer dev.Close()
	n, err := stepCounts(g, dev, stage.TrainOptions{Optimizer: "adam", LR: 1e-3, MicroBatch: int(p.MicroBatch)}, 2)
	if err != nil {
		return "", err
	}
	pred := p.Predicted.IterationS
	now, before := profile.EstimateIteration(h100, pred, n), profile.EstimateIteration(h100, pred, was)
	return fmt.Sprintf("The paper's MMT (%.3g parameters) at batch 16, its second step counted on a dry device (cuda.OpenDry: counts, computes nothing): "+
		"%d waits, %d bytes up and %d down, %d pageable copies, %d launches, %d GEMMs, %d allocations (before: %d waits, %.3g GB up and %.3g GB down, %d pageable copies). "+
		"Priced on the h100 profile on top of the plan's prediction of %.4g s (profile.EstimateIteration, docs/planner.md): %.4g s (%.3fx), against %.4g s (%.2fx) before; "+
		"a GPU measured 1.37-1.67 s an iteration before (bench/gpu/results/2026-11-25-h100), the rest of the gap the host's optimizer. "+
		"Measured since on an H200 against PyTorch eager (bench/gpu/results/2026-11-27-h200): MMT at batch 16 1.017-1.026 of its time in fp32 "+
		"and 0.894-0.996 in tf32 (bn-find/), ResNet-50 at batch 64 0.932-0.941 in fp32 and 1.066-1.069 in tf32 (bn-find/README.md).",
		float64(paramCount(g)), n.Syncs, n.H2DBytes, n.D2HBytes, n.PageableCopies, n.Launches, n.GEMMs, n.Allocs+n.HostAllocs,
		was.Syncs, float64(was.H2DBytes)/1e9, float64(was.D2HBytes)/1e9, was.PageableCopies, pred, now, now/pred, before, before/pred), nil
}
