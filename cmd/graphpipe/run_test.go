package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/models"
	gpprofile "github.com/graphpipe/graphpipe/profile"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/tensor"
)

// The test binary stands in for graphpipe when re-executed: as a worker
// (GRAPHPIPE_TEST_MAIN) or as a separate NATS server (GRAPHPIPE_TEST_NATS).
func TestMain(m *testing.M) {
	gpprofile.Child()                                                         // a measuring child of graphpipe profile, when it is one
	fuzzWorker := len(os.Args) > 1 && strings.HasPrefix(os.Args[1], "-test.") // go test -fuzz's workers re-execute this binary too
	if os.Getenv("GRAPHPIPE_TEST_MAIN") == "1" && !fuzzWorker {
		if os.Getenv("GRAPHPIPE_TEST_CRASH_WORKER") == "1" && len(os.Args) > 1 && os.Args[1] == "worker" {
			os.Exit(3) // a worker that dies at once
		}
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	if os.Getenv("GRAPHPIPE_TEST_NATS") == "1" {
		srv, err := wire.StartEmbedded(0)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(srv.URL(), srv.Token)
		bufio.NewReader(os.Stdin).ReadString('\n') // until the test closes stdin
		srv.Shutdown()
		os.Exit(0)
	}
	os.Setenv("GRAPHPIPE_TEST_MAIN", "1") // worker processes started by run are this binary
	code := m.Run()
	os.Exit(code)
}

func readParams(t testing.TB, path string) map[string][]float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	entries, _, err := tensor.DecodeSafetensors(b)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for _, e := range entries {
		out[e.Name] = e.F32
	}
	return out
}

func sameParams(t *testing.T, got, want map[string][]float32, tol float64) (worstRel float64) {
	t.Helper()
	if len(got) != len(want) || len(want) == 0 {
		t.Fatalf("%d parameters, want %d", len(got), len(want))
	}
	for name, w := range want {
		scale, worst := 0.0, 0.0
		for i := range w {
			scale = math.Max(scale, math.Abs(float64(w[i])))
			worst = math.Max(worst, math.Abs(float64(got[name][i]-w[i])))
		}
		if !(worst <= tol*math.Max(scale, 1e-12)) { // a NaN fails too
			t.Fatalf("%s: differs by %.3g (scale %.3g)", name, worst, scale)
		}
		worstRel = math.Max(worstRel, worst/math.Max(scale, 1e-12))
	}
	return worstRel
}

// TestRunMatrixEqualsTrain: for every small preset and two branchy graphs,
// gpp and spp plans, 1F1B and GPipe, graphpipe run with 3-4 worker processes
// over the embedded server ends 5 steps with graphpipe train's parameters.
func TestRunMatrixEqualsTrain(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for _, name := range []string{"mmt", "dlrm", "candle-uno", "case-study", "transformer", "mlp"} {
		files = append(files, smallModel(t, name))
	}
	for _, shape := range [][2]int{{3, 3}, {2, 5}} {
		g, err := models.Branchy(shape[0], shape[1], 8)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, g.Name()+".json")
		os.WriteFile(path, dag.Write(g.Model()), 0o644)
		files = append(files, path)
	}
	for _, model := range files {
		train := filepath.Join(dir, filepath.Base(model)+"-train")
		if code, _, errs := gp(t, "", "train", model, "--micro-batch", "4", "--steps", "5", "--optimizer", "adam", "--dump", train); code != 0 {
			t.Fatal(errs)
		}
		want := readParams(t, filepath.Join(train, "final.safetensors"))
		for _, strategy := range []string{"gpp", "spp"} {
			for _, sched := range []string{"1f1b", "zb", "gpipe"} {
				t.Run(filepath.Base(model)+"/"+strategy+"/"+sched, func(t *testing.T) {
					out := filepath.Join(dir, fmt.Sprintf("%s-%s-%s", filepath.Base(model), strategy, sched))
					devices := "4"
					if strings.Contains(model, "transformer") || strings.Contains(model, "mlp") {
						devices = "3"
					}
					code, res, errs := gp(t, "", "run", model, "--devices", devices, "--device", "cpu", "--micro-batch", "4",
						"--strategy", strategy, "--schedule", sched, "--steps", "5", "--optimizer", "adam", "--dump", out, "--json")
					if code != 0 {
						t.Fatalf("exit %d: %s", code, errs)
					}
					if !strings.Contains(res, `"stages":3`) && !strings.Contains(res, `"stages":4`) {
						t.Fatalf("not a 3-4 stage run: %s", res)
					}
					sameParams(t, readParams(t, filepath.Join(out, "final.safetensors")), want, 1e-5)
				})
			}
		}
	}
}

// TestRunEqualsTrain: graphpipe run with one worker process per stage over
// the embedded server dumps what graphpipe train dumps.
func TestRunEqualsTrain(t *testing.T) {
	model := smallModel(t, "mmt")
	dir := t.TempDir()
	runDump, trainDump := filepath.Join(dir, "run"), filepath.Join(dir, "train")
	prof, trace := filepath.Join(dir, "run.pprof"), filepath.Join(dir, "trace.json")
	code, out, errs := gp(t, "", "run", model, "--devices", "3", "--device", "cpu", "--micro-batch", "4", "--steps", "4",
		"--optimizer", "sgd", "--lr", "0.05", "--dump", runDump, "--json", "--profile", prof, "--trace", trace)
	if code != 0 {
		t.Fatalf("run: exit %d: %s", code, errs)
	}
	var sum runSummary
	if err := json.Unmarshal([]byte(out), &sum); err != nil || sum.Stages != 3 {
		t.Fatalf("summary: %s (%v)", out, err)
	}
	// every stage's compute, planned and measured, in stage order
	if len(sum.StageTimes) != 3 {
		t.Errorf("%d stage times, want 3: %s", len(sum.StageTimes), out)
	}
	for i, st := range sum.StageTimes {
		if st.Stage != i || st.MeasuredForward <= 0 || st.MeasuredBackward <= 0 || st.PredictedForward <= 0 || st.PredictedBackward <= 0 {
			t.Errorf("stage time %d: %+v", i, st)
		}
	}
	if code, _, errs := gp(t, "", "train", model, "--micro-batch", "4", "--steps", "4", "--optimizer", "sgd", "--lr", "0.05", "--dump", trainDump); code != 0 {
		t.Fatal(errs)
	}
	for _, f := range []string{"init.safetensors", "data.safetensors"} {
		a, _ := os.ReadFile(filepath.Join(runDump, f))
		b, _ := os.ReadFile(filepath.Join(trainDump, f))
		if string(a) != string(b) || len(a) == 0 {
			t.Errorf("%s differs between run and train", f)
		}
	}
	sameParams(t, readParams(t, filepath.Join(runDump, "final.safetensors")), readParams(t, filepath.Join(trainDump, "final.safetensors")), 1e-5)
	f, err := os.Open(prof)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]bool{}
	var total int64
	for _, s := range p.Sample {
		ops[s.Location[0].Line[0].Function.Name] = true
		total += s.Value[0]
	}
	if !ops["b0.l0.attn forward"] || !ops["loss backward"] || total <= 0 {
		t.Errorf("profile: %d frames, %d ns in all", len(ops), total)
	}
	tr, err := os.ReadFile(trace)
	if err != nil || !strings.Contains(string(tr), `"name": "F3"`) || !strings.Contains(string(tr), `"name": "B0"`) {
		t.Errorf("trace lacks the measured actions: %v", err)
	}
}

// TestRunWithExternalServerAndWorkers: a separate NATS server process, a
// coordinator told --workers external, and worker processes that join it.
func TestRunWithExternalServerAndWorkers(t *testing.T) {
	model := smallModel(t, "dlrm")
	dir := t.TempDir()
	externalRun(t, model, "ext1", filepath.Join(dir, "run"), [][]string{nil, nil, nil, nil})
	if c, _, e := gp(t, "", "train", model, "--micro-batch", "8", "--steps", "3", "--optimizer", "sgd", "--lr", "0.05", "--dump", filepath.Join(dir, "train")); c != 0 {
		t.Fatal(e)
	}
	sameParams(t, readParams(t, filepath.Join(dir, "run", "final.safetensors")), readParams(t, filepath.Join(dir, "train", "final.safetensors")), 1e-5)
}

// externalRun starts a NATS server process (this test binary re-executed
// as one), runs model on len(workers) cpu devices for 3 SGD steps with
// --workers external, dumping into dump, and starts one worker process per
// entry of workers with those extra arguments. It returns run's stdout
// (--json).
func externalRun(t *testing.T, model, runID, dump string, workers [][]string) string {
	out, _ := externalRunLogs(t, model, runID, dump, workers)
	return out
}

// startTestNATS starts a NATS server process (this test binary re-executed
// as one) and returns its URL and token, and how to stop it.
func startTestNATS(t *testing.T) (url, token string, stop func()) {
	t.Helper()
	self, _ := os.Executable()
	natsProc := exec.Command(self)
	natsProc.Env = append(os.Environ(), "GRAPHPIPE_TEST_NATS=1", "GRAPHPIPE_TEST_MAIN=0")
	stdin, _ := natsProc.StdinPipe()
	stdout, _ := natsProc.StdoutPipe()
	if err := natsProc.Start(); err != nil {
		t.Fatal(err)
	}
	stop = func() { stdin.Close(); natsProc.Wait() }
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stop()
		t.Fatal(err)
	}
	fmt.Sscan(line, &url, &token)
	return url, token, stop
}

// externalRunLogs is externalRun, returning each worker's stderr too.
func externalRunLogs(t *testing.T, model, runID, dump string, workers [][]string) (string, []string) {
	t.Helper()
	self, _ := os.Executable()
	url, token, stop := startTestNATS(t)
	defer stop()
	var wg sync.WaitGroup
	var code int
	var out, errs string
	wg.Add(1)
	go func() {
		defer wg.Done()
		code, out, errs = gp(t, "", "run", model, "--devices", fmt.Sprint(len(workers)), "--device", "cpu", "--micro-batch", "8", "--steps", "3",
			"--optimizer", "sgd", "--lr", "0.05", "--nats", url, "--nats-token", token, "--workers", "external", "--run", runID,
			"--dump", dump, "--json")
	}()
	var procs []*exec.Cmd
	stderrs := make([]*bytes.Buffer, len(workers))
	for i, extra := range workers {
		w := exec.Command(self, append([]string{"worker", "--nats", url, "--run", runID}, extra...)...)
		w.Env = append(os.Environ(), tokenEnv+"="+token)
		stderrs[i] = &bytes.Buffer{}
		w.Stderr = stderrs[i]
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, w)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		t.Fatal("the run did not finish")
	}
	if code != 0 {
		t.Fatalf("run: exit %d: %s", code, errs)
	}
	logs := make([]string, len(procs))
	for i, w := range procs {
		if err := w.Wait(); err != nil {
			t.Errorf("worker %d: %v: %s", i, err, stderrs[i])
		}
		logs[i] = stderrs[i].String()
	}
	return out, logs
}

func TestRunRefusals(t *testing.T) {
	model := smallModel(t, "mlp")
	plan := filepath.Join(t.TempDir(), "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "2", "--device", "cpu", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	other := smallModel(t, "candle-uno")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", plan}, "needs --model"},
		{[]string{"run", plan, "--model", other}, "made for another model"},
		{[]string{"run", model, "--workers", "cloud"}, "--workers"},
		{[]string{"run", model, "--steps", "0"}, "--steps"},
		{[]string{"worker"}, "needs --nats and --run"},
		{[]string{"run", plan, "--model", model, "--seed", "3"}, "search again with the new seed"},
		{[]string{"run", plan, "--model", model, "--devices", "4"}, "--devices: the plan " + plan + " fixes it"},
		{[]string{"run", plan, "--model", model, "--op-times", "t.json"}, "--op-times: the plan"},
	} {
		code, _, errs := gp(t, "", tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d %q, want 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}

// TestHostMemory: a run or a training whose predicted memory is over the
// host's is refused before anything starts; an unknown host size passes.
func TestHostMemory(t *testing.T) {
	model := smallModel(t, "mlp")
	defer func(f func() int64) { hostMemory = f }(hostMemory)
	hostMemory = func() int64 { return 1000 }
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", model, "--devices", "2", "--device", "cpu"}, "--batch: the plan's local workers (cpu devices, 32 samples per iteration"},
		{[]string{"train", model, "--steps", "1"}, "--batch: training mlp at batch 32, micro-batch 32, in one process needs about"},
	} {
		code, _, errs := gp(t, "", tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) || !strings.Contains(errs, "over 90% of the 1e-06 GB of this host") {
			t.Errorf("%v: exit %d %q, want 2 and %q", tc.args, code, errs, tc.want)
		}
	}
	hostMemory = func() int64 { return 0 }
	if code, _, errs := gp(t, "", "train", model, "--steps", "1"); code != 0 {
		t.Errorf("with the host's memory unknown: exit %d %q", code, errs)
	}
}

// TestHostMemoryOfAnEditedPlan: a plan whose batch was raised by hand
// (its predicted memory left as it was) is refused for the memory its
// batch takes, not run until a worker panics allocating it.
func TestHostMemoryOfAnEditedPlan(t *testing.T) {
	model := smallModel(t, "mlp")
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "2", "--device", "cpu", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	var p map[string]any
	b, err := os.ReadFile(plan)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	const big = 1 << 40
	p["batch_size"], p["micro_batch"], p["micro_batches"] = big, big, 1
	for _, st := range p["stages"].([]any) {
		st := st.(map[string]any)
		st["device_micro_batch"] = big / len(st["devices"].([]any))
	}
	edited := filepath.Join(dir, "edited.json")
	if b, err = json.Marshal(p); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(edited, b, 0o644); err != nil {
		t.Fatal(err)
	}
	defer func(f func() int64) { hostMemory = f }(hostMemory)
	hostMemory = func() int64 { return 30e9 }
	code, _, errs := gp(t, "", "run", edited, "--model", model, "--steps", "1")
	if want := "batch_size: the plan's local workers (1099511627776 samples per iteration"; code != 2 || !strings.Contains(errs, want) {
		t.Fatalf("exit %d %q, want 2 and %q", code, errs[:min(len(errs), 600)], want)
	}
}

// TestRunLateGatherEnds: a sharded stage whose all-gather runs late
// (the plan's gather_s), its replicas worker processes of their own, ends
// its run: a replica used to finish its last ring and exit before the
// other's last chunk was acknowledged, and the other waited for ever
// (make readme's resume under spp hung so). It trains what train does.
func TestRunLateGatherEnds(t *testing.T) {
	model := smallModel(t, "mmt")
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "3", "--device", "cpu", "--strategy", "spp", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	b, err := os.ReadFile(plan)
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		MicroBatch int64 `json:"micro_batch"`
		Stages     []struct {
			Devices []int   `json:"devices"`
			GatherS float64 `json:"gather_s"`
		} `json:"stages"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	late := false
	for _, st := range p.Stages {
		late = late || (len(st.Devices) > 1 && st.GatherS > 0)
	}
	if !late {
		t.Fatalf("the plan gathers no replicated stage late: %s", b)
	}
	for round := range 3 {
		done := make(chan string, 1)
		go func() {
			code, _, errs := gp(t, "", "run", plan, "--model", model, "--steps", "6", "--optimizer", "sgd", "--lr", "0.05", "--dump", filepath.Join(dir, fmt.Sprint("run", round)))
			if code != 0 {
				errs = fmt.Sprintf("exit %d: %s", code, errs)
			} else {
				errs = ""
			}
			done <- errs
		}()
		select {
		case msg := <-done:
			if msg != "" {
				t.Fatal(msg)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("round %d: the run did not end in 60 s", round)
		}
	}
	if code, _, errs := gp(t, "", "train", model, "--micro-batch", fmt.Sprint(p.MicroBatch), "--steps", "6", "--optimizer", "sgd", "--lr", "0.05", "--dump", filepath.Join(dir, "train")); code != 0 {
		t.Fatal(errs)
	}
	sameParams(t, readParams(t, filepath.Join(dir, "run0", "final.safetensors")), readParams(t, filepath.Join(dir, "train", "final.safetensors")), 1e-5)
}

// TestRunDataParallel: a plan with a stage on two devices runs as replicas in
// separate processes and ends with graphpipe train's parameters.
func TestRunDataParallel(t *testing.T) {
	model := smallModel(t, "candle-uno")
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "6", "--device", "cpu", "--micro-batch", "8", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	_, text, _ := gp(t, "", "explain", plan)
	if !strings.Contains(text, "4-5") {
		t.Fatalf("the plan has no stage on two devices:\n%s", text)
	}
	if code, _, errs := gp(t, "", "run", plan, "--model", model, "--steps", "4", "--dump", filepath.Join(dir, "run")); code != 0 {
		t.Fatal(errs)
	}
	if code, _, errs := gp(t, "", "train", model, "--micro-batch", "8", "--steps", "4", "--dump", filepath.Join(dir, "train")); code != 0 {
		t.Fatal(errs)
	}
	sameParams(t, readParams(t, filepath.Join(dir, "run", "final.safetensors")), readParams(t, filepath.Join(dir, "train", "final.safetensors")), 1e-5)
}

// TestRunFailsWhenAWorkerDies: a local worker process that exits makes run
// fail at once, naming it, instead of waiting for it.
func TestRunFailsWhenAWorkerDies(t *testing.T) {
	model := smallModel(t, "mlp")
	os.Setenv("GRAPHPIPE_TEST_CRASH_WORKER", "1")
	defer os.Unsetenv("GRAPHPIPE_TEST_CRASH_WORKER")
	start := time.Now()
	code, _, errs := gp(t, "", "run", model, "--devices", "2", "--device", "cpu", "--steps", "2")
	if code != 1 || !strings.Contains(errs, "worker process") || !strings.Contains(errs, "exit status 3") {
		t.Fatalf("exit %d, %q", code, errs)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v to notice", d)
	}
}

// TestWorkerEnv: local workers share the cores unless the user chose.
func TestWorkerEnv(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	os.Unsetenv("GOMAXPROCS")
	want := fmt.Sprintf("GOMAXPROCS=%d", max(1, goruntime.NumCPU()/3))
	if env := workerEnv(3, "tok"); !slices.Contains(env, want) || !slices.Contains(env, tokenEnv+"=tok") {
		t.Fatalf("env lacks %s or the token: %v", want, env)
	}
	t.Setenv("GOMAXPROCS", "1000")
	env := workerEnv(3, "tok")
	if slices.Contains(env, want) || !slices.Contains(env, "GOMAXPROCS=1000") {
		t.Fatalf("the user's GOMAXPROCS was overridden: %v", env)
	}
	defer func(f func() int64) { hostMemory = f }(hostMemory)
	hostMemory = func() int64 { return 30e9 }
	os.Unsetenv("GOMEMLIMIT")
	if env := workerEnv(3, "tok"); !slices.Contains(env, "GOMEMLIMIT=9000000000") {
		t.Fatalf("env lacks a third of 90%% of 30 GB as GOMEMLIMIT: %v", env)
	}
	t.Setenv("GOMEMLIMIT", "5GiB")
	if env := workerEnv(3, "tok"); slices.Contains(env, "GOMEMLIMIT=9000000000") || !slices.Contains(env, "GOMEMLIMIT=5GiB") {
		t.Fatalf("the user's GOMEMLIMIT was overridden: %v", env)
	}
}
