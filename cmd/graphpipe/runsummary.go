package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"

	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/profile"
	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/runtime/supervise"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// runSummary is `graphpipe run --json`'s object.
type runSummary struct {
	Format   string `json:"format"` // runFormat
	Model    string `json:"model"`
	Strategy string `json:"strategy"`
	Device   string `json:"device"` // the plan's device profile
	Stages   int    `json:"stages"`
	Steps    int    `json:"steps"`
	Batch    int64  `json:"batch_size"` // samples per iteration
	// FinalLoss and Losses: none for an emulated run, which computes none
	FinalLoss *jsonFloat `json:"final_loss,omitempty"`
	Losses    lossList   `json:"losses,omitempty"`
	Skipped   []int      `json:"skipped_steps"` // steps (from 1) whose update was skipped (--on-nonfinite skip)
	// LRs is each step's learning rate (the schedule's); GradNorms, with
	// --clip-grad-norm, each step's global gradient norm before clipping.
	LRs       []float64 `json:"lrs,omitempty"`
	GradNorms []float64 `json:"grad_norms,omitempty"`
	// SamplesPerS: over the whole run, worker start-up included;
	// MeasuredIterS: the median iteration, which compare uses
	SamplesPerS   float64  `json:"samples_per_s"`
	MeasuredIterS float64  `json:"measured_iteration_s"`
	PredictedIter float64  `json:"predicted_iteration_s"`
	Workers       string   `json:"workers"`
	Devices       []string `json:"devices,omitempty"` // where each worker computed
	// BLAS is what computed the cpu workers' matrix products, each
	// distinct answer once, in worker order (tensor.BLASInfo's words).
	BLAS     []string `json:"blas,omitempty"`
	Emulated string   `json:"emulated,omitempty"`
	// StageTimes: each stage's compute per micro-batch, planned and measured
	// in the last iteration.
	StageTimes []runtime.StageTime `json:"stage_times,omitempty"`
	// Edges: each plan edge's transfers in the last iteration, both ways:
	// the transport they took (ipc or nats), bytes, seconds measured.
	Edges []runtime.EdgeTime `json:"edges,omitempty"`
	// with --eval-data: the last evaluation, and every one
	// Assignment, for a run on a pool's agents: which agent ran each
	// worker, on which host.
	Assignment []assignedWorker `json:"assignment,omitempty"`
	// Recoveries: how the run went on after each generation that ended
	// early, per phase; Replans: those that changed plans (--elastic).
	Recoveries   []supervise.Recovery `json:"recoveries"`
	Replans      []supervise.Recovery `json:"replans"`
	EvalLoss     *float64             `json:"eval_loss,omitempty"`
	EvalAccuracy *float64             `json:"eval_accuracy,omitempty"`
	Evals        []evalJSON           `json:"evals,omitempty"`
	// DeviceCalls, for a run whose workers compute on a CUDA backend: per
	// stage on one, what its first replica asked of its device in its last
	// iteration; DeviceEstimateS the predicted iteration with the calls of
	// the stage whose calls cost most, priced on the plan's device profile
	// (profile.EstimateIteration).
	DeviceCalls     []stageCalls `json:"device_calls,omitempty"`
	DeviceEstimateS float64      `json:"device_estimate_s,omitempty"`
	// Memory: what each worker held of its stage's state at the end (its
	// parameters, its optimizer state: a shard of it where the plan
	// shards it) and its process's peak resident set; none when emulated.
	Memory []runtime.WorkerMemory `json:"memory,omitempty"`
	// Samples is the samples the run's steps saw (none emulated);
	// BackpropSamples those of them that had a backward pass (fewer with
	// --selective-backprop), and BackpropPerStep each step's (with it).
	Samples         int64 `json:"samples"`
	BackpropSamples int64 `json:"backprop_samples"`
	BackpropPerStep []int `json:"backprop_per_step,omitempty"`
	// IterationS is each iteration's measured seconds (the coordinator's:
	// from its go to the last report, an evaluation after it aside).
	IterationS []float64 `json:"iteration_s"`
}

// stageCalls is a stage's device calls in run --json.
type stageCalls struct {
	Stage int `json:"stage"`
	cuda.Counts
}

// deviceCalls is each stage's device calls and the iteration they make,
// priced on the plan's profile (none when no stage is on a device).
func deviceCalls(p *plan.Plan, res *runtime.Result) ([]stageCalls, float64) {
	var out []stageCalls
	est := 0.0
	for st, c := range res.DeviceCalls {
		if c != nil {
			out = append(out, stageCalls{st, *c})
			est = max(est, profile.EstimateIteration(p.Device, p.Predicted.IterationS, *c))
		}
	}
	return out, est
}

// printRun prints a finished run: its summary line, or --json's object.
func printRun(w io.Writer, job *supervise.Job, res *supervise.Result, secs float64, workers workersFlag, asJSON bool) error {
	g, plan, o, steps := job.Graph, job.Plan, job.Options, job.Steps
	ran := len(res.Losses)
	sum := runSummary{Format: runFormat, Model: g.Name(), Strategy: plan.Strategy, Device: plan.Device.Name, Stages: len(plan.Stages), Steps: ran,
		Batch: plan.BatchSize, Losses: res.Losses, FinalLoss: ptr(jsonFloat(res.Losses[ran-1])), Skipped: []int{}, SamplesPerS: float64(plan.BatchSize) * float64(ran) / secs,
		MeasuredIterS: median(res.Iters), PredictedIter: plan.Predicted.IterationS, Workers: workers.String(), Devices: res.Devices}
	for k := steps - ran; k < steps; k++ { // a resumed run reports its own steps
		sum.LRs = append(sum.LRs, o.Train.Rate(k))
	}
	sum.GradNorms = res.GradNorms
	sum.Samples, sum.BackpropSamples = backpropSamples(plan.BatchSize, ran, res.Backprop)
	sum.IterationS = res.Iters
	if o.Train.Selective != nil {
		sum.BackpropPerStep = res.Backprop
	}
	for _, j := range res.Joined {
		if j.BLAS != "" && !slices.Contains(sum.BLAS, j.BLAS) {
			sum.BLAS = append(sum.BLAS, j.BLAS)
		}
	}
	for _, i := range res.Skipped {
		sum.Skipped = append(sum.Skipped, i+1)
	}
	sum.StageTimes = runtime.StageTimes(plan, res.Result)
	sum.Edges = runtime.EdgeTimes(plan, res.Result)
	sum.DeviceCalls, sum.DeviceEstimateS = deviceCalls(plan, res.Result)
	sum.Memory = res.Memory
	sum.Recoveries, sum.Replans = recoveriesJSON(res.Recoveries)
	if _, ok := workers.pool(); ok {
		sum.Assignment = assignment(plan, res.Result)
	}
	for _, r := range res.Evals {
		e := toEvalJSON(r)
		sum.Evals = append(sum.Evals, e)
		sum.EvalLoss, sum.EvalAccuracy = finiteOrNil(&e.Loss), e.Accuracy
	}
	if o.Emulate {
		sum.Emulated, sum.Losses, sum.FinalLoss, sum.Samples, sum.BackpropSamples = plan.Device.Name, nil, nil, 0, 0
	}
	if asJSON {
		return json.NewEncoder(w).Encode(sum)
	}
	if o.Emulate {
		fmt.Fprintf(w, "%s: EMULATED %s devices (no loss computed): %s on %s, %.4g s per iteration measured (median), %.4g s predicted\n",
			sum.Model, sum.Emulated, plural(ran, "step"), stagesWord(sum.Stages), sum.MeasuredIterS, sum.PredictedIter)
		return nil
	}
	fmt.Fprintf(w, "%s: %s on %s, loss %.6g → %.6g, %.4g samples/s; %.4g s per iteration measured (median), %.4g s predicted",
		sum.Model, plural(ran, "step"), stagesWord(sum.Stages), res.Losses[0], *sum.FinalLoss, sum.SamplesPerS, sum.MeasuredIterS, sum.PredictedIter)
	if sum.DeviceEstimateS > 0 {
		fmt.Fprintf(w, " (%.4g s with the device's calls priced)", sum.DeviceEstimateS)
	}
	if n := len(res.Evals); n > 0 {
		fmt.Fprintf(w, "; %s", evalLine(res.Evals[n-1]))
	}
	if o.Train.Selective != nil {
		fmt.Fprintf(w, "; %d of %d samples backpropagated (%.1f%%)", sum.BackpropSamples, sum.Samples, 100*float64(sum.BackpropSamples)/float64(max(1, sum.Samples)))
	}
	fmt.Fprintln(w)
	return nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func ptr[T any](v T) *T { return &v }

// assignedWorker is one worker of a pool run: its slot of the plan and the
// agent that ran it.
type assignedWorker struct {
	Worker     int    `json:"worker"`
	Stage      int    `json:"stage"`
	Replica    int    `json:"replica"`
	PlanDevice int    `json:"plan_device"` // the plan's device number
	Node       int    `json:"node"`        // the plan's node
	Host       string `json:"host"`
	PID        int    `json:"pid"`
	Device     string `json:"device"` // where it computed
	Agent      string `json:"agent"`
}

func assignment(p *plan.Plan, res *runtime.Result) []assignedWorker {
	var out []assignedWorker
	for i, s := range supervise.Slots(p) {
		a := assignedWorker{Worker: s.Worker, Stage: s.Stage, Replica: s.Replica, PlanDevice: s.Device, Node: s.Node}
		if i < len(res.Joined) {
			j := res.Joined[i]
			a.Host, a.PID, a.Device, a.Agent = j.Host, j.PID, j.Device, j.Agent
		}
		out = append(out, a)
	}
	return out
}
