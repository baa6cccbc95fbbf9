package main

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/profile"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// needEmulator skips where the CUDA kernels' CPU emulator cannot be built
// for want of a C++ compiler.
func needEmulator(t *testing.T) {
	t.Helper()
	if _, err := cuda.EmulatorLibrary(); errors.Is(err, cuda.ErrNoCompiler) {
		t.Skipf("the CUDA kernels' CPU emulator needs a C++ compiler: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
}

// TestRunOnEmulatedGPUs: a 2-stage run whose workers take the CUDA code
// path (on the emulator) ends with train's parameters, and so does train
// itself on that path.
func TestRunOnEmulatedGPUs(t *testing.T) {
	needEmulator(t)
	model := smallModel(t, "mmt")
	dir := t.TempDir()
	common := []string{"--micro-batch", "4", "--steps", "3", "--optimizer", "sgd", "--lr", "0.05"}
	if c, _, e := gp(t, "", append([]string{"train", model, "--dump", filepath.Join(dir, "cpu")}, common...)...); c != 0 {
		t.Fatal(e)
	}
	want := readParams(t, filepath.Join(dir, "cpu", "final.safetensors"))
	if c, _, e := gp(t, "", append([]string{"train", model, "--backend", "cuda-emulator", "--dump", filepath.Join(dir, "train-emu")}, common...)...); c != 0 {
		t.Fatal(e)
	}
	sameParams(t, readParams(t, filepath.Join(dir, "train-emu", "final.safetensors")), want, 1e-4)
	c, out, e := gp(t, "", append([]string{"run", model, "--devices", "2", "--device", "cpu", "--backend", "cuda-emulator", "--json",
		"--dump", filepath.Join(dir, "run-emu")}, common...)...)
	if c != 0 {
		t.Fatal(e)
	}
	if strings.Count(out, "CPU emulator") != 2 {
		t.Errorf("the run's devices should name the emulator twice: %s", out)
	}
	sameParams(t, readParams(t, filepath.Join(dir, "run-emu", "final.safetensors")), want, 1e-4)
}

// TestMixedCPUAndGPUWorkers: four external workers, two on the CUDA code
// path and two on the CPU, train one run to train's parameters.
func TestMixedCPUAndGPUWorkers(t *testing.T) {
	needEmulator(t)
	model := smallModel(t, "dlrm")
	dir := t.TempDir()
	emu, cpu := []string{"--backend", "cuda-emulator"}, []string{"--backend", "cpu"}
	out := externalRun(t, model, "mixed1", filepath.Join(dir, "run"), [][]string{emu, cpu, emu, cpu})
	var sum runSummary
	json.Unmarshal([]byte(out), &sum)
	if devs := strings.Join(sum.Devices, "|"); strings.Count(devs, "CPU emulator") != 2 || strings.Count(devs, "cpu") != 2 {
		t.Errorf("the run's devices should be two emulated GPUs and two CPUs: %s", out)
	}
	if c, _, e := gp(t, "", "train", model, "--micro-batch", "8", "--steps", "3", "--optimizer", "sgd", "--lr", "0.05", "--dump", filepath.Join(dir, "train")); c != 0 {
		t.Fatal(e)
	}
	sameParams(t, readParams(t, filepath.Join(dir, "run", "final.safetensors")), readParams(t, filepath.Join(dir, "train", "final.safetensors")), 1e-4)
}

// TestBackendCUDAWithoutDriver: where no driver loads, every command that
// takes --backend cuda fails at the start with exit 1, naming the library.
func TestBackendCUDAWithoutDriver(t *testing.T) {
	if _, err := cuda.Available(); err == nil {
		t.Skip("a CUDA driver is present here")
	}
	model := smallModel(t, "mlp")
	for _, args := range [][]string{
		{"train", model, "--steps", "1", "--backend", "cuda"},
		{"run", model, "--devices", "2", "--device", "cpu", "--steps", "1", "--backend", "cuda"},
		{"worker", "--nats", "nats://127.0.0.1:1", "--run", "x", "--backend", "cuda"},
		{"profile", "--device", "cuda"},
	} {
		code, _, errs := gp(t, "", args...)
		if code != 1 || !strings.Contains(errs, "cannot load libcuda") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Errorf("%s: exit %d, stderr %q; want exit 1 and one line naming libcuda", args[0], code, errs)
		}
	}
	for _, args := range [][]string{
		{"run", model, "--devices", "2", "--device", "cpu", "--steps", "1", "--backend", "tpu"},
		{"run", model, "--devices", "2", "--device", "cpu", "--steps", "1", "--gpus", "0"},
		{"train", model, "--steps", "1", "--backend", "cuda", "--gpu", "-1"},
		{"profile", "--device", "tpu"},
	} {
		if code, _, errs := gp(t, "", args...); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2", args, code, errs)
		}
	}
}

// TestRunOnGPU: on a machine with a GPU, a 2-stage run on it ends with the
// CPU's parameters within 1e-4.
func TestRunOnGPU(t *testing.T) {
	if _, err := cuda.Available(); err != nil {
		t.Skipf("no GPU to run on: %v", err)
	}
	model := smallModel(t, "mmt")
	dir := t.TempDir()
	common := []string{"--micro-batch", "4", "--steps", "3", "--optimizer", "sgd", "--lr", "0.05"}
	if c, _, e := gp(t, "", append([]string{"train", model, "--dump", filepath.Join(dir, "cpu")}, common...)...); c != 0 {
		t.Fatal(e)
	}
	c, out, e := gp(t, "", append([]string{"run", model, "--devices", "2", "--device", "cpu", "--backend", "cuda", "--json",
		"--dump", filepath.Join(dir, "gpu")}, common...)...)
	if c != 0 {
		t.Fatal(e)
	}
	t.Logf("run: %s", out)
	rel := sameParams(t, readParams(t, filepath.Join(dir, "gpu", "final.safetensors")), readParams(t, filepath.Join(dir, "cpu", "final.safetensors")), 1e-4)
	t.Logf("parameters after 3 steps, GPU run against CPU: largest difference %.3g of the tensor's largest value", rel)
}

// TestProfileFeedsSearch: a measured profile is written and a search plans
// with it; on the emulator, the GPU meter's code path runs too.
func TestProfileFeedsSearch(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "cpu.json")
	c, out, e := gp(t, "", "profile", "--device", "cpu", "--quick", "-o", prof, "--json")
	if c != 0 {
		t.Fatal(e)
	}
	var cpu profile.Result
	if err := json.Unmarshal([]byte(out), &cpu); err != nil {
		t.Fatal(err)
	}
	// the links were probed, and the profile holds their fit
	var samples []profile.KernelSample
	for i, size := range cpu.LinkSizes {
		samples = append(samples, profile.KernelSample{Work: float64(size), Seconds: cpu.LinkS[i]})
	}
	lat, bw, err := profile.FitLink(samples)
	if err != nil || lat != cpu.Device.IntraLat || bw != cpu.Device.IntraBW || !strings.HasPrefix(cpu.LinksOf, "measured") {
		t.Fatalf("links %q: probed %v in %v s, fit %g s + bytes / %g B/s (%v), profile %g s, %g B/s", cpu.LinksOf, cpu.LinkSizes, cpu.LinkS, lat, bw, err, cpu.Device.IntraLat, cpu.Device.IntraBW)
	}
	c, out, e = gp(t, "", "search", smallModel(t, "mmt"), "--devices", "2", "--device", prof, "--json")
	if c != 0 || !strings.Contains(out, `"device":"cpu (measured)"`) {
		t.Fatalf("search with the measured profile: exit %d, %s %s", c, out, e)
	}
	needEmulator(t)
	c, out, e = gp(t, "", "profile", "--device", "cuda-emulator", "--quick", "--json")
	if c != 0 || !strings.Contains(out, `"gemm_bf16_s"`) {
		t.Fatalf("profile on the emulator: exit %d, %s %s", c, out, e)
	}
	var res profile.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	// a GEMM sweep per precision, each one's rate fitted into the profile
	if len(res.TF32) != len(res.Sizes) || len(res.BF16) != len(res.Sizes) || !(res.Device.Rates.TF32 > 0) || !(res.Device.Rates.BF16 > 0) {
		t.Fatalf("profile on the emulator: %d TF32 and %d BF16 GEMMs for %d sizes, rates %+v", len(res.TF32), len(res.BF16), len(res.Sizes), res.Device.Rates)
	}
	// both launch figures are written; links cannot be probed from one GPU
	if res.KernelLaunch <= 0 || res.Device.Launch <= 0 || len(res.LinkSizes) != 0 || res.LinksOf != "cpu" {
		t.Errorf("kernel launch %g s, op call %g s, links %q %v", res.KernelLaunch, res.Device.Launch, res.LinksOf, res.LinkSizes)
	}
	t.Logf("emulator: %.3g µs per kernel launch, %.3g µs per op call through the executor", res.KernelLaunch*1e6, res.Device.Launch*1e6)
}

// TestImportedModelOnEmulatedGPUs: PyTorch's two-tower model, imported (a
// model@2 file: conv2d, batch_norm, max_pool2d, global_avg_pool, matmul,
// softmax, transpose, reshape, slice, div, reduce_mean, ...), trains with
// every op on the CUDA code path (the emulator), in one process and as a
// 3-stage run, to the CPU's parameters and batch-norm statistics from the
// same --init weights.
func TestImportedModelOnEmulatedGPUs(t *testing.T) {
	needEmulator(t)
	checkImportedModelOn(t, "cuda-emulator", "CPU emulator", 1e-5)
}

// TestImportedModelOnGPU is TestImportedModelOnEmulatedGPUs on a real GPU:
// the model@2 kernels (conv2d, batch_norm, pools, ...) against the CPU.
func TestImportedModelOnGPU(t *testing.T) {
	if _, err := cuda.Available(); err != nil {
		t.Skipf("no GPU to run on: %v", err)
	}
	checkImportedModelOn(t, "cuda", "", 1e-4)
}

// checkImportedModelOn trains the imported two-tower (batch_norm, dropout
// off, ...) 3 steps on backend, in one process and as a 3-stage run, and
// compares both with the CPU's train within tol; every worker's device
// must name device, when given.
func checkImportedModelOn(t *testing.T, backend, device string, tol float64) {
	dir := t.TempDir()
	model, weights, plan := filepath.Join(dir, "m.json"), filepath.Join(dir, "w.safetensors"), filepath.Join(dir, "plan.json")
	if c, _, e := gp(t, "", "import", "../../onnx/testdata/models/two_tower.onnx", "-o", model, "--weights", weights,
		"--loss", "softmax_cross_entropy", "--batch", "12"); c != 0 {
		t.Fatal(e)
	}
	if c, _, e := gp(t, "", "search", model, "--devices", "3", "--device", "cpu", "--micro-batch", "4", "-o", plan); c != 0 {
		t.Fatal(e)
	}
	common := []string{"--init", weights, "--steps", "3", "--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9"}
	if c, _, e := gp(t, "", append([]string{"train", model, "--micro-batch", "4", "--dump", filepath.Join(dir, "cpu")}, common...)...); c != 0 {
		t.Fatal(e)
	}
	want := readParams(t, filepath.Join(dir, "cpu", "final.safetensors"))
	if want["bn1.running_var"] == nil {
		t.Fatalf("no batch-norm statistics among the %d tensors dumped", len(want))
	}
	c, _, e := gp(t, "", append([]string{"train", model, "--micro-batch", "4", "--backend", backend, "--dump", filepath.Join(dir, "train-emu")}, common...)...)
	if c != 0 {
		t.Fatal(e)
	}
	if line := regexp.MustCompile(`graphpipe: conv2d on .*: (cudnn [0-9.]+ \(batch_norm too\), algorithms by (measured search|heuristics)|im2col \+ GEMM \(.*\))\n`).FindString(e); line == "" {
		t.Errorf("train on %s does not say how conv2d runs: %s", backend, e)
	} else {
		t.Log(strings.TrimSpace(line))
	}
	rel := sameParams(t, readParams(t, filepath.Join(dir, "train-emu", "final.safetensors")), want, tol)
	t.Logf("train on %s against the CPU: largest difference %.3g of the tensor's largest value", backend, rel)
	c, out, e := gp(t, "", append([]string{"run", plan, "--model", model, "--backend", backend, "--json", "--dump", filepath.Join(dir, "run-emu")}, common...)...)
	if c != 0 {
		t.Fatal(e)
	}
	if device != "" && strings.Count(out, device) != 3 {
		t.Errorf("the run's devices should name %s three times: %s", device, out)
	}
	rel = sameParams(t, readParams(t, filepath.Join(dir, "run-emu", "final.safetensors")), want, tol)
	t.Logf("3-stage run on %s against train on the CPU: largest difference %.3g", backend, rel)
}
