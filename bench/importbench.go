package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/search"
)

// torchPython is Debian's python3 with python3-torch, which exports the
// torchvision models; without it those rows say so.
const torchPython = "/usr/bin/python3"

// ImportSection times graphpipe import, in a process of its own whose peak
// resident memory the kernel reports: ResNet-50, GoogLeNet and Inception-v3
// as PyTorch exports them (weights inside the file), and a generated
// 1-billion-parameter transformer with its weights in an external data file
// (100 million in the quick run); then it searches each on 32 v100.
func ImportSection(c Config) (*Section, error) {
	s := &Section{Name: "import", Title: "Importing ONNX models",
		Intro: "`graphpipe import MODEL.onnx -o M.json --weights W.safetensors`, run as a process of its own; peak memory is its maximum resident set " +
			"(VmHWM, which the process reports at exit: its rusage would count the report's own memory, inherited at the fork), set against the weights' bytes (float32). The torchvision models are exported by PyTorch with the README's call " +
			"(weights inside the .onnx file, which the importer reads whole: about two copies at the peak); the transformer is written by " +
			"bench.WriteTransformer, as the exporter writes a GPT-like model, with its weights in an external data file, which the importer streams. " +
			"Search: `graphpipe search M.json --devices 32 --device v100` on the imported model, in process.",
		Columns: []string{"model", "parameters", "weights GB", "import s", "peak resident GB", "peak / weights", "ops", "search s on 32 v100", "gpp samples/s", "stages"}}
	dir, bin, err := graphpipeWorkdir("graphpipe-import-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return nil, err
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	for _, m := range []struct{ name, loss string }{{"resnet50", "softmax_cross_entropy"}, {"googlenet", "softmax_cross_entropy"}, {"inception_v3", "softmax_cross_entropy"}} {
		c.Log("import: exporting %s with PyTorch", m.name)
		path := filepath.Join(dir, m.name+".onnx")
		cmd := exec.Command(torchPython, filepath.Join(root, "onnx/testdata/torch/export.py"), m.name, path)
		if out, err := cmd.CombinedOutput(); err != nil {
			s.Notes = append(s.Notes, fmt.Sprintf("%s: not measured: the PyTorch export failed (it needs Debian's python3-torch and python3-torchvision): %v: %s", m.name, err, lastLine(string(out))))
			continue
		}
		row, err := importRow(c, bin, path, m.name, m.loss)
		if err != nil {
			return nil, err
		}
		s.Rows = append(s.Rows, row)
	}
	spec := TransformerSpec{Layers: 20, Width: 2048, Heads: 16, Vocab: 32000, Seq: 128, Classes: 10}
	if c.Quick {
		spec = TransformerSpec{Layers: 8, Width: 1024, Heads: 16, Vocab: 8000, Seq: 128, Classes: 10}
	}
	c.Log("import: writing a %.2g-parameter transformer", float64(spec.Params()))
	path, _, err := WriteTransformer(dir, spec)
	if err != nil {
		return nil, err
	}
	row, err := importRow(c, bin, path, fmt.Sprintf("transformer (%d layers of %d, external data)", spec.Layers, spec.Width), "softmax_cross_entropy")
	if err != nil {
		return nil, err
	}
	s.Rows = append(s.Rows, row)
	return s, nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// importRow imports one model in a child process and searches it.
func importRow(c Config, bin, path, name, loss string) ([]string, error) {
	c.Log("import: importing %s", name)
	model, weights := path+".json", path+".safetensors"
	cmd := exec.Command(bin, "import", path, "-o", model, "--weights", weights, "--loss", loss)
	start := time.Now()
	out, peak, err := childPeak(cmd)
	secs := time.Since(start).Seconds()
	if err != nil {
		return nil, fmt.Errorf("graphpipe import %s: %v: %s", name, err, out)
	}
	if _, err := os.Stat(weights); err != nil {
		return nil, err
	}
	g, err := dag.LoadFile(model)
	if err != nil {
		return nil, err
	}
	wbytes := 4 * (g.Total().Params + g.Total().Buffers)
	os.Remove(weights) // the transformer's are gigabytes
	c.Log("import: searching %s on 32 v100", name)
	sstart := time.Now()
	plan, serr := search.Search(g, search.Options{Device: plan.Profiles["v100"], Devices: 32})
	ssecs := time.Since(sstart).Seconds()
	sps, stages := "none", "-"
	if serr == nil {
		sps, stages = fmt.Sprintf("%.4g", float64(plan.BatchSize)/plan.Predicted.IterationS), fmt.Sprint(len(plan.Stages))
	}
	return []string{name, fmt.Sprintf("%.4g", float64(g.Total().Params)), fmt.Sprintf("%.3f", float64(wbytes)/1e9),
		fmt.Sprintf("%.2f", secs), fmt.Sprintf("%.3f", float64(peak)/1e9), fmt.Sprintf("%.2f", float64(peak)/float64(wbytes)),
		fmt.Sprint(g.NumOps()), fmt.Sprintf("%.2f", ssecs), sps, stages}, nil
}
