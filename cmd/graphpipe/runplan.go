package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/search"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// defaultDevice is run's --device when the user gave none: the profile of
// the devices the workers are, and why. CPU workers (and the kernels' CPU
// emulator) plan as cpu; CUDA workers as the built-in profile of their GPU;
// an emulated run as the devices it emulates. External workers cannot be
// asked before the plan is made: they are taken for CPU workers, and the
// line printed says how to choose.
func (f *deviceFlags) defaultDevice(workers workersFlag, emulate string) (name, why string, err error) {
	switch {
	case emulate != "":
		return emulate, "the devices --emulate names", nil
	case workers.external():
		return "cpu", "external workers, taken for CPU workers: --device names theirs", nil
	case workers.kind == poolWorkers:
		return "cpu", "the agents of a pool, taken for CPU workers: --device names theirs", nil
	case f.backend != "cuda" && workers.tasks():
		return "cpu", "the tasks compute on the CPU", nil
	case f.backend != "cuda":
		return "cpu", "the local workers compute on the CPU", nil
	}
	gpu := 0
	if f.gpus != "" {
		n, err := cuda.Available()
		if err != nil {
			return "", "", err
		}
		entries, err := parseGPUs(f.gpus, n)
		if err != nil {
			return "", "", err
		}
		gpu = -1
		for _, e := range entries {
			if e >= 0 {
				gpu = e
				break
			}
		}
		if gpu < 0 {
			return "cpu", "--gpus puts every worker on the CPU", nil
		}
	}
	dev, err := cuda.Open(gpu)
	if err != nil {
		return "", "", err // exit 1: no driver, no such GPU
	}
	gpuName := dev.Name
	dev.Close()
	name, exact := gpuProfile(gpuName)
	switch {
	case name == "":
		return "", "", usagef("--device: no built-in profile for the workers' GPU %s: measure one with 'graphpipe profile --device cuda -o gpu.json' and pass --device gpu.json", gpuName)
	case !exact:
		return name, fmt.Sprintf("the nearest built-in profile to the workers' GPU, %s ('graphpipe profile --device cuda' measures one)", gpuName), nil
	}
	return name, "the workers' GPU, " + gpuName, nil
}

// gpuProfile is the built-in profile for a GPU by the name its driver gives,
// and whether it is that GPU's own; "" when none is near.
func gpuProfile(gpuName string) (name string, exact bool) {
	n := strings.ToLower(gpuName)
	for _, p := range []struct {
		family, profile string
		exact           bool
	}{{"h100", "h100", true}, {"h200", "h100", false}, {"a100", "a100", true}, {"v100", "v100", true}} {
		if strings.Contains(n, p.family) {
			return p.profile, p.exact
		}
	}
	return "", false
}

// describePlan says, before a run trains, what plan it trains: where it
// came from, its stages and devices, its micro-batches and its prediction.
func describePlan(w io.Writer, p *plan.Plan, from, why string) {
	fmt.Fprintf(w, "plan        %s for %s on %d × %s (%s)\n", p.Strategy, p.Model.Name, p.Devices, p.Device.Name, from)
	if why != "" {
		fmt.Fprintf(w, "            --device %s: %s\n", p.Device.Name, why)
	}
	stages := stagesWord(len(p.Stages))
	if len(p.Stages) <= 8 {
		devs := make([]string, len(p.Stages))
		for i, s := range p.Stages {
			devs[i] = plan.DeviceList(s.Devices)
		}
		stages += " on devices " + strings.Join(devs, " | ")
	}
	fmt.Fprintf(w, "stages      %s, micro-batch %d (%d per iteration of %d samples), schedule %s\n", stages, p.MicroBatch, p.MicroBatches, p.BatchSize, p.Schedule)
	fmt.Fprintf(w, "predicted   %.4g s per iteration, %.4g samples/s\n", p.Predicted.IterationS, p.Predicted.SamplesPerS)
}

// modelAndPlan loads a model and plans it, or loads a plan and its model.
func modelAndPlan(cmd *cobra.Command, path, modelPath string, sf *searchFlags, seed *int64, stdin io.Reader) (*dag.Graph, *plan.Plan, error) {
	data, name, err := readInput(path, stdin)
	if err != nil {
		return nil, nil, err
	}
	var probe struct {
		Format string `json:"format"`
	}
	json.Unmarshal(data, &probe)
	if probe.Format == plan.PlanFormat {
		if modelPath == "" {
			return nil, nil, usagef("running a plan needs --model, the model file it was made for")
		}
		if seed != nil {
			return nil, nil, usagef("--seed: a plan is made for one model, seed included; search again with the new seed")
		}
		for _, f := range searchFlagNames {
			if cmd.Flags().Changed(f) {
				return nil, nil, usagef("--%s: the plan %s fixes it; search again to change it", f, name)
			}
		}
		g, err := loadModel(modelPath, stdin)
		if err != nil {
			return nil, nil, err
		}
		plan, err := decodePlan(data, name, g, modelPath)
		if err != nil {
			return nil, nil, err
		}
		return g, plan, nil
	}
	g, err := parseModel(data, name) // stdin, if path is "-", is read already
	if err != nil {
		return nil, nil, err
	}
	if seed != nil {
		m := *g.Model()
		m.Seed = *seed
		if g, err = rebuild(&m); err != nil {
			return nil, nil, err
		}
	}
	o, err := sf.options()
	if err != nil {
		return nil, nil, err
	}
	plan, err := search.Search(g, o)
	if err != nil {
		return nil, nil, searchError(err)
	}
	return g, plan, nil
}

func randomID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}
