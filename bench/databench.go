package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/profile"
	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor"
)

// DataSection measures training on a dataset (--data) against the model's
// synthetic inputs, in one process, pair by pair: for each small preset,
// rounds of K steps from a fresh trainer on each source, alternating, and
// the median samples/s of each. The dataset holds 64 batches of the
// model's synthetic samples, shuffled. Then, unless quick, the memory of a
// dataset far larger than the limit a worker runs under: graphpipe train
// --data on 1.5 GB of candle-uno samples with GOMEMLIMIT=256MiB, its peak
// resident set from the kernel.
func DataSection(c Config) (*Section, error) {
	s := &Section{Name: "data", Title: "Training on a dataset",
		Intro: "`graphpipe train MODEL --data D` against the same model on its synthetic data, in one process: for each small preset, " +
			"rounds of training steps from a fresh trainer on each, alternating, median samples/s over the rounds. D holds 64 batches of the " +
			"model's samples in a safetensors file, visited in a shuffled order (each batch's rows read from the file by position).",
		Columns: []string{"model", "batch", "steps per round", "rounds", "synthetic samples/s", "--data samples/s", "data / synthetic"}}
	dir, err := os.MkdirTemp("", "graphpipe-data-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	rounds, steps := 7, 200
	if c.Quick {
		rounds, steps = 3, 100
	}
	for _, name := range []string{"mmt", "dlrm", "candle-uno", "mlp"} {
		c.Log("data: %s", name)
		row, err := dataRow(dir, name, rounds, steps)
		if err != nil {
			return nil, err
		}
		s.Rows = append(s.Rows, row)
	}
	if !c.Quick {
		note, err := dataMemory(c, dir)
		if err != nil {
			return nil, err
		}
		s.Notes = append(s.Notes, note)
	}
	return s, nil
}

// dataRow times one preset on both sources.
func dataRow(dir, name string, rounds, steps int) ([]string, error) {
	e, err := models.Lookup(name)
	if err != nil {
		return nil, err
	}
	g, err := e.Build(e.Small)
	if err != nil {
		return nil, err
	}
	B := int(g.BatchSize())
	path := filepath.Join(dir, name+".safetensors")
	if err := writeSynthetic(path, g, 64*B); err != nil {
		return nil, err
	}
	set, err := runtime.OpenData(path, g, false)
	if err != nil {
		return nil, err
	}
	defer set.Close()
	var synth, data []float64
	for r := 0; r < rounds; r++ {
		for _, fromData := range []bool{false, true} {
			t, err := stage.NewTrainer(g, stage.TrainOptions{Optimizer: "adam", LR: 1e-3})
			if err != nil {
				return nil, err
			}
			if fromData {
				if t.Source, err = runtime.NewDataSource(set, B, g.Seed(), true); err != nil {
					return nil, err
				}
			}
			start := time.Now()
			for s := 0; s < steps; s++ {
				if _, _, err := t.Step(s); err != nil {
					return nil, err
				}
			}
			sps := float64(steps*B) / time.Since(start).Seconds()
			if fromData {
				data = append(data, sps)
			} else {
				synth = append(synth, sps)
			}
		}
	}
	ms, md := medianOf(synth), medianOf(data)
	return []string{name, fmt.Sprint(B), fmt.Sprint(steps), fmt.Sprint(rounds), f(ms), f(md), fmt.Sprintf("%.3f", md/ms)}, nil
}

// writeSynthetic writes n samples of g's synthetic data to path.
func writeSynthetic(path string, g *dag.Graph, n int) error {
	ds, err := stage.NewDataset(g)
	if err != nil {
		return err
	}
	b, err := ds.Batch(0, n)
	if err != nil {
		return err
	}
	var entries []tensor.Named
	for name, v := range b {
		entries = append(entries, tensor.Named{Name: name, Shape: v.Shape, F32: v.Data, I32: v.Ints})
	}
	data, err := tensor.EncodeSafetensors(entries, nil)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

func medianOf(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// dataMemory trains candle-uno for 20000 steps on 8e6 samples (1.57 GB)
// under GOMEMLIMIT=256MiB in a child process and reports its peak resident
// set.
func dataMemory(c Config, dir string) (string, error) {
	bin, err := buildGraphpipe(dir)
	if err != nil {
		return "", err
	}
	model, data := filepath.Join(dir, "cu.json"), filepath.Join(dir, "cu-8m.safetensors")
	for _, args := range [][]string{{"models", "export", "candle-uno", "--preset", "small", "-o", model},
		{"data", "synth", model, "-o", data, "--samples", "8000000"}} {
		c.Log("data: graphpipe %v", args[:2])
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("graphpipe %v: %v: %s", args, err, out)
		}
	}
	st, err := os.Stat(data)
	if err != nil {
		return "", err
	}
	c.Log("data: training on %.2f GB under GOMEMLIMIT=256MiB", float64(st.Size())/1e9)
	cmd := exec.Command(bin, "train", model, "--data", data, "--steps", "20000")
	cmd.Env = append(os.Environ(), "GOMEMLIMIT=256MiB")
	out, peak, err := childPeak(cmd)
	if err != nil {
		return "", fmt.Errorf("graphpipe train --data: %v: %s", err, out)
	}
	os.Remove(data)
	return fmt.Sprintf("Memory: `graphpipe train` of candle-uno (small) on a %.2f GB dataset (8e6 samples), 20000 shuffled steps, "+
		"under GOMEMLIMIT=256MiB: peak resident set %.0f MiB (VmHWM, which the process reports at exit), the limit 256 MiB.",
		float64(st.Size())/1e9, float64(peak)/(1<<20)), nil
}

// childPeak runs cmd (a graphpipe command line) with peak reporting on and
// returns the largest peak resident set, in bytes, of graphpipe's processes
// (profile.WritePeak): the rusage of a child counts the parent's
// resident set at the fork, the bench report's gigabytes.
func childPeak(cmd *exec.Cmd) ([]byte, int64, error) {
	dir, err := os.MkdirTemp("", "graphpipe-peak-")
	if err != nil {
		return nil, 0, err
	}
	defer os.RemoveAll(dir)
	cmd.Env = append(cmd.Environ(), profile.PeakDirEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, 0, err
	}
	peak := profile.MaxPeak(dir)
	if peak == 0 {
		return out, 0, fmt.Errorf("%s reported no peak resident set", cmd.Path)
	}
	return out, peak, nil
}
