package bench

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/graphpipe/graphpipe/tensor"
)

// The CPU's own speed: sgemm (ours as it runs, the system BLAS alone, the
// Go kernels alone) and training against PyTorch eager on the same batches.
// The machine may be shared: every comparison interleaves its two sides
// call by call (sgemm) or run by run (training) and quotes medians.

// sgemmFunc is tensor.Sgemm's signature.
type sgemmFunc = func(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)

// SgemmSection times square products at 256-2048 on 1 and 2 threads:
// tensor.Sgemm as it runs (the loaded library where there is one), the
// library alone through the same run-time loading, and the Go kernels
// alone, the three interleaved call by call.
func SgemmSection(c Config) (*Section, error) {
	load := loadAvg()
	lib := tensor.LibrarySgemm()
	info := tensor.BLAS()
	s := &Section{Name: "sgemm", Title: "sgemm on this machine: ours, the system BLAS and the Go kernels",
		Columns: []string{"C = A·B, float32", "threads", "ours (tensor.Sgemm), GFLOP/s", "system BLAS alone", "Go kernels alone", "Go kernels / BLAS"},
		Intro: "Square row-major products, each side called in turn on the same matrices until each has run a second or more; " +
			"the median of each side's calls. ours is tensor.Sgemm as graphpipe runs it: the system BLAS where one loads (" + info.String() +
			"), the Go kernels otherwise. Threads: GOMAXPROCS. The library runs one thread per call: on 2 threads, tensor.Sgemm " +
			"cuts a product into 2 halves, each a library call on its own goroutine, and the library's column is that. " +
			"On 1 thread every call is timed by its thread's CPU time (the machine is shared: the wall clock would count " +
			"the time other processes hold the core); on 2, by the wall clock."}
	if lib == nil {
		s.Notes = append(s.Notes, "No system BLAS loaded: "+info.Why+"; the library's column is empty.")
	}
	sizes := []int{256, 512, 1024, 2048}
	if c.Quick {
		sizes = []int{256, 512}
	}
	for _, threads := range []int{1, 2} {
		for _, n := range sizes {
			c.Log("sgemm %d³ on %d threads", n, threads)
			sides := []sgemmFunc{tensor.Sgemm, tensor.SgemmGo}
			if lib != nil {
				sides = append(sides, lib)
			}
			rates := sgemmMedians(n, threads, sides)
			row := []string{fmt.Sprintf("%d³", n), fmt.Sprint(threads), f(rates[0]), "not loaded", f(rates[1]), "-"}
			if lib != nil {
				row[3], row[5] = f(rates[2]), fmt.Sprintf("%.3f", rates[1]/rates[2])
			}
			s.Rows = append(s.Rows, row)
		}
	}
	s.Notes = append(s.Notes, "OpenBLAS picks its kernels from the CPU's model number as it loads; a CPU newer than the library "+
		"(0.3.21 here) gets its SSE3 kernels, so graphpipe sets OPENBLAS_CORETYPE for the load to the kernels of the CPU's vector "+
		"units (SkylakeX with AVX-512, Haswell with AVX2) unless the user set it.", loadNote(load))
	return s, nil
}

// sgemmMedians calls each side in turn on the same n³ product at threads
// GOMAXPROCS until each has had a second and 5 calls, and returns each
// side's median GFLOP/s. On one thread each call is timed by the thread's
// CPU time where it can be read (every side computes on the calling
// thread then), so that other processes holding the core do not count;
// on two, by the wall clock.
func sgemmMedians(n, threads int, sides []sgemmFunc) []float64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(threads))
	base := time.Now()
	clock := func() float64 { return time.Since(base).Seconds() }
	if _, ok := threadCPU(); ok && threads == 1 {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		clock = func() float64 { s, _ := threadCPU(); return s }
	}
	r := rand.New(rand.NewSource(1))
	a, b, out := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
	for i := range a {
		a[i], b[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
	}
	times := make([][]float64, len(sides))
	for _, g := range sides { // warm up: packing buffers, the library's own
		g(false, false, n, n, n, 1, a, n, b, n, 0, out, n)
	}
	start := time.Now()
	for time.Since(start) < time.Duration(len(sides))*time.Second || len(times[0]) < 5 {
		for i, g := range sides {
			t := clock()
			g(false, false, n, n, n, 1, a, n, b, n, 0, out, n)
			times[i] = append(times[i], clock()-t)
		}
	}
	rates := make([]float64, len(sides))
	for i, ts := range times {
		rates[i] = 2 * float64(n) * float64(n) * float64(n) / median(ts) / 1e9
	}
	return rates
}

// loadNote says how busy the machine was over a measurement: the 1-minute
// load average (/proc/loadavg) as it began and as it ended.
func loadNote(before string) string {
	return fmt.Sprintf("The machine's 1-minute load average: %s as the measurement began, %s as it ended, on %d cores.", before, loadAvg(), runtime.NumCPU())
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(b))[0]
}

func median(x []float64) float64 {
	s := append([]float64(nil), x...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// trainCase is a model CPUTraining trains: a zoo entry at a preset ("" for
// its default).
type trainCase struct {
	model, preset string
	steps         int
}

// cpuTrainCases are the zoo's small presets and the default mlp.
func cpuTrainCases(quick bool) []trainCase {
	var out []trainCase
	for _, m := range []string{"mmt", "dlrm", "candle-uno", "case-study", "transformer", "mlp"} {
		out = append(out, trainCase{m, "small", 30})
	}
	if !quick {
		out = append(out, trainCase{"mlp", "", 8})
	}
	return out
}

// torchThreads is the cores each side trains on.
const torchThreads = 2

// CPUTraining trains each zoo small preset and the default mlp with Adam
// (lr 1e-3) in graphpipe (graphpipe train, a process of its own, the
// system BLAS as it loads) and in PyTorch eager (bench/gpu/torch_step.py:
// the same model file built by stage/testdata/torch/gptorch.py, from the
// weights and batches graphpipe's --dump wrote, torch.optim.Adam), 2
// threads each, and graphpipe again with GRAPHPIPE_BLAS=go (the Go
// kernels): the three alternate run by run, rounds times, and each side's
// samples/s is the batch over the median of its runs' median step times
// (the first 2 steps of a run left out). Without PyTorch the rows say so.
func CPUTraining(c Config) (*Section, error) {
	dir, bin, err := graphpipeWorkdir("graphpipe-cpu-train")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return nil, err
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	torch := exec.Command(torchPython, "-c", "import torch; print(torch.__version__)")
	version, terr := torch.Output()
	info := tensor.BLAS()
	s := &Section{Name: "cpu-training", Title: "Training on the CPU against PyTorch eager (2 threads; PyTorch at the better of 2 and 1)",
		Columns: []string{"model", "batch", "graphpipe, samples/s", "PyTorch eager", "graphpipe / PyTorch", "graphpipe, Go kernels (GRAPHPIPE_BLAS=go)", "Go kernels / PyTorch"},
		Intro: fmt.Sprintf("graphpipe train and bench/gpu/torch_step.py (PyTorch %s eager: the model file built by stage/testdata/torch/gptorch.py "+
			"from graphpipe's --dump, torch.optim.Adam, lr 1e-3, zero_grad(set_to_none=True)) on the same batches from the same weights, %d threads "+
			"each (GOMAXPROCS; torch.set_num_threads), and PyTorch at 1 thread too, the better of its two kept (its threads in the column); "+
			"graphpipe's BLAS: %s. The sides alternate run by run; samples/s is the batch over "+
			"the median of the runs' median step times, the first 2 steps of each run left out.", strings.TrimSpace(string(version)), torchThreads, info)}
	if terr != nil {
		s.Notes = append(s.Notes, fmt.Sprintf("PyTorch is not installed for %s (Debian: python3-torch): graphpipe's side alone.", torchPython))
	}
	if core := tensor.OpenBLASCore(); core != "" && os.Getenv("OPENBLAS_CORETYPE") == "" {
		s.Notes = append(s.Notes, fmt.Sprintf("PyTorch runs its products on the same OpenBLAS (Debian's libblas.so.3), given the same "+
			"OPENBLAS_CORETYPE=%s graphpipe sets for it (without it, OpenBLAS 0.3.21 runs its SSE3 kernels on this CPU).", core))
	}
	load := loadAvg()
	rounds := 3
	if c.Quick {
		rounds = 1
	}
	for _, tc := range cpuTrainCases(c.Quick) {
		name := tc.model + " " + tc.preset + " preset"
		if tc.preset == "" {
			name = tc.model + " (the zoo's default)"
		}
		c.Log("cpu training: %s", name)
		row, err := trainRow(c, bin, root, dir, tc, rounds, terr == nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		s.Rows = append(s.Rows, append([]string{name}, row...))
	}
	s.Notes = append(s.Notes, loadNote(load))
	return s, nil
}

// trainRow measures one case: graphpipe, PyTorch and graphpipe on the Go
// kernels, alternating, rounds times.
func trainRow(c Config, bin, root, dir string, tc trainCase, rounds int, withTorch bool) ([]string, error) {
	model := filepath.Join(dir, tc.model+tc.preset+".json")
	args := []string{"models", "export", tc.model, "-o", model}
	if tc.preset != "" {
		args = append(args, "--preset", tc.preset)
	}
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("export: %v: %s", err, out)
	}
	steps := fmt.Sprint(tc.steps)
	opt := []string{"--optimizer", "adam", "--lr", "0.001"}
	dump := filepath.Join(dir, "dump")
	os.RemoveAll(dump)
	threads := fmt.Sprint(torchThreads)
	env := append(os.Environ(), "GOMAXPROCS="+threads)
	gp := func(extraEnv ...string) (float64, int, error) {
		cmd := exec.Command(bin, append([]string{"train", model, "--steps", steps, "--json"}, opt...)...)
		cmd.Env = append(env, extraEnv...)
		out, err := cmd.Output()
		if err != nil {
			return 0, 0, fmt.Errorf("graphpipe train: %v", err)
		}
		var sum struct {
			Batch      int       `json:"batch_size"`
			IterationS []float64 `json:"iteration_s"`
		}
		if err := json.Unmarshal(out, &sum); err != nil || len(sum.IterationS) < 3 {
			return 0, 0, fmt.Errorf("graphpipe train --json: %v (%d steps timed)", err, len(sum.IterationS))
		}
		return median(sum.IterationS[2:]), sum.Batch, nil
	}
	pt := func(threads int) (float64, error) {
		out := filepath.Join(dir, "torch.json")
		cmd := exec.Command(torchPython, append([]string{filepath.Join(root, "bench/gpu/torch_step.py"), model, dump, "--device", "cpu",
			"--steps", steps, "--warmup", "2", "--threads", fmt.Sprint(threads), "--json", out}, opt...)...)
		cmd.Env = env
		if core := tensor.OpenBLASCore(); core != "" && os.Getenv("OPENBLAS_CORETYPE") == "" {
			cmd.Env = append(cmd.Env, "OPENBLAS_CORETYPE="+core)
		}
		if b, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("torch_step.py: %v: %s", err, lastLine(string(b)))
		}
		b, err := os.ReadFile(out)
		if err != nil {
			return 0, err
		}
		var r struct {
			Median float64 `json:"median_iteration_s"`
		}
		return r.Median, json.Unmarshal(b, &r)
	}
	// the dump PyTorch starts from: this case's weights and batches
	cmd := exec.Command(bin, append([]string{"train", model, "--steps", steps, "--dump", dump, "--json"}, opt...)...)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("graphpipe train --dump: %v: %s", err, lastLine(string(out)))
	}
	var ours, goOnly []float64
	theirs := map[int][]float64{} // by PyTorch's threads
	batch := 0
	for r := 0; r < rounds; r++ {
		t, b, err := gp()
		if err != nil {
			return nil, err
		}
		ours, batch = append(ours, t), b
		for _, n := range torchThreadings(withTorch) {
			t, err := pt(n)
			if err != nil {
				return nil, err
			}
			theirs[n] = append(theirs[n], t)
		}
		if t, _, err = gp("GRAPHPIPE_BLAS=go"); err != nil {
			return nil, err
		}
		goOnly = append(goOnly, t)
		c.Log("  round %d: graphpipe %.4g s, go kernels %.4g s, torch by threads %v", r+1, ours[r], goOnly[r], theirs)
	}
	rate := func(ts []float64) float64 { return float64(batch) / median(ts) }
	row := []string{fmt.Sprint(batch), f(rate(ours)), "not installed", "-", f(rate(goOnly)), "-"}
	if withTorch { // PyTorch at its better thread count
		best := torchThreads
		for n, ts := range theirs {
			if rate(ts) > rate(theirs[best]) {
				best = n
			}
		}
		pt := rate(theirs[best])
		row[2] = fmt.Sprintf("%s (%d thread%s; %d: %s)", f(pt), best, map[bool]string{true: "", false: "s"}[best == 1], 3-best, f(rate(theirs[3-best])))
		row[3], row[5] = fmt.Sprintf("%.2f", rate(ours)/pt), fmt.Sprintf("%.2f", rate(goOnly)/pt)
	}
	return row, nil
}

// torchThreadings are the thread counts PyTorch runs at: 2 (graphpipe's)
// and 1, its better one kept: on a busy machine its 2 OpenMP threads,
// which spin while they wait, can be many times slower than 1.
func torchThreadings(withTorch bool) []int {
	if !withTorch {
		return nil
	}
	return []int{torchThreads, 1}
}
