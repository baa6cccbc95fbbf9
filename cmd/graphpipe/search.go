package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/search"
	"github.com/graphpipe/graphpipe/stage"
)

// searchFlags are the flags shared by every command that plans.
type searchFlags struct {
	devices, perNode   int
	device             string
	memoryGB           float64
	batch, microBatch  int64
	strategy, schedule string
	opTimes            string
	stdin              io.Reader // what a "-" file reads
	// optBytes is the optimizer state per parameter to plan for (run's
	// --optimizer); 0: search's default, Adam's.
	optBytes  int64
	recompute string
	cluster   string // --cluster FILE
	// timeSliced prices the devices as GPUs time-sliced among the workers
	// that share each (plan.Device.TimeSliced): run sets it where its
	// local CUDA workers outnumber the GPUs
	timeSliced bool
	// devicesFrom is the variable the devices were read from instead of
	// --devices (a run of tasks plans one device per task: SLURM_NTASKS,
	// WORLD_SIZE), "" for the flag: messages name it.
	devicesFrom string
	cmd         *cobra.Command // the command registered with: which flags were set
	// precision and attention are what to price the plan in: search's
	// --precision and --attention, run's (the device flags')
	precision, attention string
	// optimizerState is --optimizer-state: where each stage's optimizer
	// state may live (search.Options.OptimizerState); noStreaming keeps
	// the weights on the devices, as a run needs (the runtime does not
	// stream them)
	optimizerState string
	noStreaming    bool
	// backpropFraction is selective backprop's kept fraction to price
	// (sbFlags.fraction); 0: every sample
	backpropFraction float64
	// flushOnly is why the run planned for cannot train without a flush
	// (search.Options.FlushOnly: twoVersionsWhy), "" where it can
	flushOnly string
}

// searchFlagNames are searchFlags' flags: a command given a plan refuses them.
var searchFlagNames = []string{"devices", "device", "devices-per-node", "cluster", "memory-gb", "batch", "strategy", "schedule", "micro-batch", "op-times", "recompute", "optimizer-state"}

func (f *searchFlags) register(cmd *cobra.Command) {
	f.cmd = cmd
	cmd.Flags().StringVar(&f.cluster, "cluster", "", "plan for the devices a cluster `FILE` (graphpipe/cluster@1) describes: groups of nodes, each of one device profile, and the link between nodes (instead of --devices, --device and --devices-per-node)")
	cmd.Flags().IntVar(&f.devices, "devices", 8, "number of devices")
	cmd.Flags().StringVar(&f.device, "device", "v100", "device profile: "+strings.Join(plan.ProfileNames(), ", ")+", or a JSON profile file")
	cmd.Flags().IntVar(&f.perNode, "devices-per-node", 4, "devices per node (faster links inside a node)")
	cmd.Flags().Float64Var(&f.memoryGB, "memory-gb", 0, "memory per device in GB (default: the profile's)")
	cmd.Flags().Int64Var(&f.batch, "batch", 0, "global mini-batch (default: the model's batch_size)")
	cmd.Flags().StringVar(&f.strategy, "strategy", "gpp", "planner: gpp (graph pipeline), spp (best sequential pipeline) or spp-exact")
	cmd.Flags().StringVar(&f.schedule, "schedule", "1f1b", scheduleHelp)
	cmd.Flags().Int64Var(&f.microBatch, "micro-batch", 0, "force this micro-batch size on every stage (default: the planner chooses)")
	cmd.Flags().StringVar(&f.recompute, "recompute", "auto", "activation recomputation: auto (a stage reruns its forward during backward where that makes a faster plan fit), off or all (every stage)")
	cmd.Flags().StringVar(&f.optimizerState, "optimizer-state", "auto", "where each stage's optimizer state lives: auto (sharded across a stage's replicas where it has several, spilled to host memory where only that fits), replicated (every replica holds all of it), sharded (ZeRO-1: each replica holds 1/k and steps 1/k of the parameters) or host (master weights and optimizer state in host memory, stepped on the host's cores)")
	cmd.Flags().StringVar(&f.opTimes, "op-times", "", "price every op from times measured on this model (`FILE` from 'graphpipe profile --model'), not from the profile's FLOP rate")
}

// memoryLimit is --memory-gb in bytes, 0 for the profile's. A limit under
// a byte is refused: it would round to 0, the profile's memory, and plan
// for what was not asked.
func (f *searchFlags) memoryLimit() (int64, error) {
	gb := f.memoryGB
	switch {
	case !(gb >= 0 && gb <= 1e6):
		return 0, usagef("--memory-gb: must be between 0 and 1e6, got %g", gb)
	case gb > 0 && gb*1e9 < 1:
		return 0, usagef("--memory-gb: %g GB is less than a byte (0 is the profile's memory)", gb)
	}
	return int64(gb * 1e9), nil
}

func (f *searchFlags) options() (search.Options, error) {
	if f.cluster != "" {
		return f.clusterOptions()
	}
	dev, err := plan.LookupDevice(f.device)
	if err != nil {
		data, _, rerr := readInput(f.device, f.stdin)
		if rerr != nil && f.device != "-" && looksLikePath(f.device) {
			return search.Options{}, flagInputError("--device", rerr)
		}
		if rerr != nil {
			if f.device == "-" {
				return search.Options{}, rerr
			}
			return search.Options{}, usagef("--device: %v", err)
		}
		if dev, err = plan.ParseDevice(data); err != nil {
			return search.Options{}, inputf("--device %s: %v", f.device, err)
		}
	}
	if f.timeSliced {
		dev = dev.TimeSliced()
	}
	if f.devicesFrom != "" && (f.devices < 1 || f.devices > plan.MaxDevices) {
		return search.Options{}, inputf("%s: %d tasks, but a run of tasks plans one device per task, and a plan has 1 to %d devices", f.devicesFrom, f.devices, plan.MaxDevices)
	}
	if f.perNode < 1 {
		return search.Options{}, usagef("--devices-per-node: must be positive, got %d", f.perNode)
	}
	limit, err := f.memoryLimit()
	if err != nil {
		return search.Options{}, err
	}
	o := search.Options{Strategy: f.strategy, Schedule: f.schedule, Device: dev, Devices: f.devices, Recompute: f.recompute,
		DevicesPerNode: f.perNode, MemoryLimit: limit, Batch: f.batch, MicroBatch: f.microBatch, OptimizerBytes: f.optBytes,
		Precision: f.precision, Attention: f.attention,
		OptimizerState: f.optimizerState, NoStreaming: f.noStreaming, BackpropFraction: f.backpropFraction, FlushOnly: f.flushOnly}
	if f.opTimes != "" {
		data, _, err := readInput(f.opTimes, f.stdin)
		if err != nil {
			return o, flagInputError("--op-times", err)
		}
		if o.OpTimes, err = plan.DecodeOpTimes(data); err != nil {
			return o, inputf("--op-times %s: %v", f.opTimes, err)
		}
	}
	return o, nil
}

// clusterOptions is options with --cluster: the devices its file says, a
// device profile file it names read beside it.
func (f *searchFlags) clusterOptions() (search.Options, error) {
	if f.cmd != nil {
		for _, name := range []string{"devices", "device", "devices-per-node"} {
			if f.cmd.Flags().Changed(name) {
				return search.Options{}, usagef("--%s: --cluster %s says what the devices are; leave out --%s", name, f.cluster, name)
			}
		}
	}
	data, path, err := readInput(f.cluster, f.stdin)
	if err != nil {
		return search.Options{}, flagInputError("--cluster", err)
	}
	dir := filepath.Dir(path)
	c, err := plan.DecodeCluster(data, func(name string) ([]byte, error) {
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		return os.ReadFile(name)
	})
	if err != nil {
		return search.Options{}, inputf("--cluster %s: %v", f.cluster, err)
	}
	limit, err := f.memoryLimit()
	if err != nil {
		return search.Options{}, err
	}
	o := search.Options{Strategy: f.strategy, Schedule: f.schedule, Cluster: c, Recompute: f.recompute,
		MemoryLimit: limit, Batch: f.batch, MicroBatch: f.microBatch, OptimizerBytes: f.optBytes,
		Precision: f.precision, Attention: f.attention,
		OptimizerState: f.optimizerState, NoStreaming: f.noStreaming, BackpropFraction: f.backpropFraction, FlushOnly: f.flushOnly}
	if f.opTimes != "" {
		return o, usagef("--op-times: op times are measured on one device; not with --cluster")
	}
	return o, nil
}

// planFor makes the search plan for o's optimizer state.
func (f *searchFlags) planFor(o stage.TrainOptions) {
	f.optBytes = stateBytes(o)
	if f.optBytes == 0 {
		f.optBytes = search.NoOptimizerState
	}
}

// looksLikePath says whether a --device value names a file rather than a
// profile: it has a directory part or a .json suffix, or is there.
func looksLikePath(s string) bool {
	_, err := os.Stat(s)
	return err == nil || strings.ContainsAny(s, `/\`) || strings.HasSuffix(strings.ToLower(s), ".json")
}

// searchError maps the planner's errors onto exit codes: a flag it cannot
// use is a usage error and a refusal before any search (the model cannot
// fit the devices as given, which a bound says without a plan) bad input,
// both exit 2; when the search found nothing, exit 1.
func searchError(err error) error {
	var oe *search.OptionError
	if errors.As(err, &oe) {
		return usagef("%v", oe)
	}
	var np *search.NoPlanError
	if errors.As(err, &np) && np.Bound {
		return inputf("%v", np)
	}
	return err // NoPlanError and the rest: exit 1
}

// planSummary is `graphpipe search --json`'s object.
type planSummary struct {
	Format       string   `json:"format"` // searchFormat
	Model        string   `json:"model"`
	Strategy     string   `json:"strategy"`
	Chosen       string   `json:"chosen"`
	Schedule     string   `json:"schedule"`
	Precision    string   `json:"precision"`
	Device       string   `json:"device"`
	Devices      int      `json:"devices"`
	Stages       int      `json:"stages"`
	Depth        int      `json:"depth"`
	BatchSize    int64    `json:"batch_size"`
	MicroBatch   int64    `json:"micro_batch"`
	MicroBatches int      `json:"micro_batches"`
	IterationS   float64  `json:"iteration_s"`
	SamplesPerS  float64  `json:"samples_per_s"`
	Bubble       float64  `json:"bubble_fraction"`
	PeakMemory   int64    `json:"peak_memory_bytes"`
	MemoryLimit  int64    `json:"memory_limit_bytes"`
	SearchS      float64  `json:"search_s"`
	Feasible     bool     `json:"feasible"`
	Notes        []string `json:"notes,omitempty"`
	// gpp only: the best sequential plan the search found, and this plan's
	// throughput over it
	SequentialSamplesPerS float64 `json:"sequential_samples_per_s,omitempty"`
	OverSequential        float64 `json:"over_sequential,omitempty"`
	// OptimizerState is where each stage's optimizer state lives, stage
	// by stage (plan.StatePlacements)
	OptimizerState []stageState `json:"optimizer_state"`
	// the ideal bound of the plan's devices (plan.Plan.Ideal: every device
	// at its best efficiency of its peak in the plan's precision, never
	// idle, over the model's forward and backward FLOPs a sample), and the
	// plan's throughput over it
	IdealSamplesPerS float64 `json:"ideal_samples_per_s,omitempty"`
	OfIdeal          float64 `json:"of_ideal,omitempty"`
	// BackpropFraction, for a plan priced for selective backprop, is the
	// fraction of samples priced with a backward pass
	BackpropFraction float64 `json:"backprop_fraction,omitempty"`
}

// stageState is one stage's placement in search --json: where its state
// lives, whether its weights stream, the bytes it saves each device and
// copies over the host link per iteration.
type stageState struct {
	Stage         int    `json:"stage"`
	Devices       int    `json:"devices"`
	Placement     string `json:"placement"`
	StreamWeights bool   `json:"stream_weights,omitempty"`
	SavedBytes    int64  `json:"saved_bytes"`
	HostCopyBytes int64  `json:"host_copy_bytes"`
}

func summary(p *plan.Plan, g *dag.Graph) planSummary {
	s := planSummary{Format: searchFormat, Model: p.Model.Name, Strategy: p.Strategy, Chosen: p.Search.Chosen, Schedule: p.Schedule,
		Precision: p.PrecisionName(), Device: p.Device.Name, Devices: p.Devices, Stages: len(p.Stages), Depth: p.Predicted.Depth,
		BatchSize: p.BatchSize, MicroBatch: p.MicroBatch, MicroBatches: p.MicroBatches, IterationS: p.Predicted.IterationS,
		SamplesPerS: p.Predicted.SamplesPerS, Bubble: p.Predicted.Bubble, PeakMemory: p.Predicted.PeakMemory, MemoryLimit: p.MemoryLimit,
		SearchS: p.Search.Seconds, Feasible: p.Predicted.Feasible, Notes: p.Search.Notes}
	for _, st := range p.Stages {
		s.OptimizerState = append(s.OptimizerState, stageState{st.ID, len(st.Devices), st.StateName(), st.StreamWeights, st.StateSavedBytes, st.HostCopyBytes})
	}
	if q := p.Search.Sequential; q != nil && q.SamplesPerS > 0 {
		s.SequentialSamplesPerS, s.OverSequential = q.SamplesPerS, p.Predicted.SamplesPerS/q.SamplesPerS
	}
	if ideal := p.Ideal(g); ideal > 0 {
		s.IdealSamplesPerS, s.OfIdeal = ideal, p.Predicted.SamplesPerS/ideal
	}
	s.BackpropFraction = p.BackpropFraction
	return s
}

// stagesWord is "1 stage" or "n stages".
func stagesWord(n int) string {
	if n == 1 {
		return "1 stage"
	}
	return fmt.Sprintf("%d stages", n)
}

func printSummary(w io.Writer, p *plan.Plan) {
	if c := p.Cluster; c != nil {
		var kinds []string
		for _, k := range c.Kinds {
			kinds = append(kinds, fmt.Sprintf("%d × %s (%d per node, %.3g GB each)", k.Devices, k.Name(), k.DevicesPerNode, float64(k.MemoryLimit)/1e9))
		}
		fmt.Fprintf(w, "plan        %s for %s on %s\n", p.Strategy, p.Model.Name, strings.Join(kinds, " + "))
	} else {
		fmt.Fprintf(w, "plan        %s for %s on %d × %s (%d per node, %.3g GB each)\n", p.Strategy, p.Model.Name, p.Devices, p.Device.Name, p.DevicesPerNode, float64(p.MemoryLimit)/1e9)
	}
	if p.Search.Chosen != p.Strategy {
		fmt.Fprintf(w, "            the best plan found is the %s planner's\n", p.Search.Chosen)
	}
	fmt.Fprintf(w, "stages      %d, depth %d, micro-batch %d (%d per iteration of %d samples), schedule %s\n", len(p.Stages), p.Predicted.Depth, p.MicroBatch, p.MicroBatches, p.BatchSize, p.Schedule)
	if l := weightsLine(p); l != "" {
		fmt.Fprintf(w, "weights     %s\n", l)
	}
	if p.PrecisionName() != "fp32" || p.AttentionName() != plan.Unfused {
		fmt.Fprintf(w, "precision   %s\n", precisionLine(p))
	}
	fmt.Fprintf(w, "predicted   %.4g s per iteration, %.4g samples/s, bubble %.1f%%\n", p.Predicted.IterationS, p.Predicted.SamplesPerS, 100*p.Predicted.Bubble)
	if p.Cluster != nil {
		fmt.Fprintf(w, "memory      peak %.3g GB per device, each within its kind's\n", float64(p.Predicted.PeakMemory)/1e9)
	} else {
		fmt.Fprintf(w, "memory      peak %.3g GB per device of %.3g GB\n", float64(p.Predicted.PeakMemory)/1e9, float64(p.MemoryLimit)/1e9)
	}
	if r := recomputing(p); r != "" {
		fmt.Fprintf(w, "recompute   %s rerun their forward during backward, keeping only their inputs per micro-batch in flight\n", r)
	}
	for _, line := range stateLines(p) {
		fmt.Fprintf(w, "state       %s\n", line)
	}
	for _, line := range ringLines(p) {
		fmt.Fprintf(w, "rings       %s\n", line)
	}
	if b := backpropLine(p); b != "" {
		fmt.Fprintf(w, "backprop    %s\n", b)
	}
	if q := p.Search.Sequential; q != nil && q.SamplesPerS > 0 {
		fmt.Fprintf(w, "sequential  the best sequential plan found: %.4g samples/s (%s, depth %d, micro-batch %d); this plan %.3f×\n",
			q.SamplesPerS, stagesWord(q.Stages), q.Depth, q.MicroBatch, p.Predicted.SamplesPerS/q.SamplesPerS)
	}
	if c := runCosts(p); c != "" {
		fmt.Fprintf(w, "run costs   %s\n", c)
	}
	fmt.Fprintf(w, "search      %.3g s, %d candidate plans simulated\n", p.Search.Seconds, p.Search.Candidates)
	for _, n := range p.Search.Notes {
		fmt.Fprintf(w, "note        %s\n", n)
	}
}

// runCosts says what the plan's profile prices beyond ops and links (its
// RunCosts): the iteration's fixed cost and its go, the workers sharing a host's
// cores, a message's cost at either end and what more workers on a host
// add to its travel; "" where it prices none.
func runCosts(p *plan.Plan) string {
	var parts []string
	if p.FixedS > 0 {
		parts = append(parts, fmt.Sprintf("%.3g ms per iteration after the last action (the reports to the coordinator)", p.FixedS*1e3))
	}
	if late := lastGo(p); late > 0 {
		parts = append(parts, fmt.Sprintf("the coordinator's go reaches the last stage after %.3g ms", late*1e3))
	}
	if k := plan.HostWorkers(p.Devices, p.DevicesPerNode); p.Slowdown > 0 {
		cores := ""
		if c := p.Device.HostCores; c > 0 {
			cores = fmt.Sprintf(" of %d cores", c)
		}
		what := "a host" + cores
		if !p.Device.IsCPU() {
			what = "a GPU, time-sliced"
		}
		parts = append(parts, fmt.Sprintf("%s share %s: %s for the workers computing beside them (×%.3g were all busy all the time)",
			plural(k, "worker"), what, stageFactors(p), p.Device.Slowdown(k)))
	}
	send, recv := 0.0, 0.0
	for _, e := range p.Edges {
		send, recv = max(send, e.SendS), max(recv, e.RecvS)
	}
	if send > 0 || recv > 0 {
		parts = append(parts, fmt.Sprintf("a message costs its sender up to %.3g µs and its receiver up to %.3g µs", send*1e6, recv*1e6))
	}
	if k := busiestNode(p); p.Device.JoinExtra(k) > 0 {
		parts = append(parts, fmt.Sprintf("with %d workers on a host a message between them takes %.3g µs longer than with 2 (the profile's joins)",
			k, p.Device.JoinExtra(k)*1e6))
	}
	return strings.Join(parts, "; ")
}

// busiestNode is the most workers of p on one node.
func busiestNode(p *plan.Plan) int {
	k := 0
	for _, st := range p.Stages {
		for _, d := range st.Devices {
			k = max(k, p.NodeWorkers(p.NodeOf(d)))
		}
	}
	return k
}

// lastGo is when the coordinator's go reaches the plan's last worker, by
// its profile (0 where it measured none).
func lastGo(p *plan.Plan) float64 {
	workers := 0
	for _, s := range p.Stages {
		workers += len(s.Devices)
	}
	if p.Device.GoS == 0 && p.Device.GoWorkerS == 0 {
		return 0
	}
	return p.Device.GoDelay(workers - 1)
}

func newSearchCmd(stdin io.Reader) *cobra.Command {
	f := searchFlags{stdin: stdin}
	var sb sbFlags
	var out, optimizer string
	var momentum float32
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "search MODEL",
		Short: "Plan a model: stages, devices, micro-batch size and schedule",
		Long: `Cut a model into a DAG of pipeline stages, give each stage devices and a
micro-batch size, order its passes, and predict the iteration time with the
simulator. gpp also runs spp's search and keeps the faster plan, so it is
never worse than spp, and prints the best sequential plan beside its own.
Exit 2 when the model cannot fit the devices whatever the plan (an op's
weights, gradients, optimizer state and fewest activations over a device's
memory, or the model's over all of them: checked before any search), exit 1
when the search finds no plan that fits; each says which limit failed.`,
		Example: "  graphpipe search mmt.json --devices 32 --device v100 -o plan.json\n  graphpipe search dlrm.json --devices 16 --strategy spp --json",
		Args:    args("MODEL"),
		RunE: func(cmd *cobra.Command, a []string) error {
			g, err := loadModel(a[0], stdin)
			if err != nil {
				return err
			}
			to := stage.TrainOptions{Optimizer: optimizer, Momentum: momentum}
			if _, err := stage.StateBytes(to); err != nil {
				return usagef("%v", err)
			}
			f.planFor(to)
			if err := sb.check(cmd, ""); err != nil {
				return err
			}
			f.backpropFraction = sb.fraction(cmd)
			o, err := f.options()
			if err != nil {
				return err
			}
			if err := checkOutputs("-o", out); err != nil {
				return err
			}
			p, err := search.Search(g, o)
			if err != nil {
				return searchError(err)
			}
			if out != "" {
				if err := writeOutput(cmd, "-o", out, p.Encode()); err != nil {
					return err
				}
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return json.NewEncoder(w).Encode(summary(p, g))
			}
			printSummary(w, p)
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&optimizer, "optimizer", "adam", "plan memory for this optimizer's state ("+stage.OptimizerNames()+"): run trains with it")
	cmd.Flags().Float32Var(&momentum, "momentum", 0, "with --optimizer sgd: plan for its momentum buffer")
	cmd.Flags().StringVarP(&out, "output", "o", "", "write the plan (graphpipe/plan@1) to `FILE`")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	cmd.Flags().StringVar(&f.precision, "precision", "fp32", "price the plan in this precision, which run then trains in: "+precisionWords)
	cmd.Flags().StringVar(&f.attention, "attention", "unfused", "price attention as it runs: "+attentionHelp)
	sb.registerSearch(cmd)
	return cmd
}

// precisionWords says what each precision is, for the flags that take one.
const precisionWords = "fp32 (float32 everywhere), tf32 (float32 storage, matrix products on TF32 tensor cores: PyTorch's allow_tf32) or bf16 (PyTorch's autocast: matrix products on bf16 operands with float32 accumulation, activations, stashes and stage edges in bf16, weights, gradients and optimizer state in float32); tf32 and bf16 need a device with their rate (a100, h100)"

// precisionLine is explain's word on a plan's precision: the products'
// rate and the bytes it prices activations and the weights' copy in.
func precisionLine(p *plan.Plan) string {
	name := p.PrecisionName()
	peak, _ := p.Device.Peak(name)
	line := fmt.Sprintf("%s: matrix products at %.4g TFLOP/s (fp32 %.4g)", name, peak/1e12, p.Device.PeakFLOPs/1e12)
	if p.AttentionName() == plan.Fused {
		line += "; attention fused (its scores never stored, computed on the CUDA cores and again in the backward)"
	}
	if a := plan.ActivationBytes(name); a != 4 {
		line += fmt.Sprintf("; activations, stashes and stage edges in %d bytes an element", a)
	}
	if c := plan.WeightCopyBytes(name); c > 0 {
		line += fmt.Sprintf("; a %d-byte copy of every weight beside its float32 weight, gradient and optimizer state", c)
	}
	return line
}

// loadPlan reads a plan file and, when modelPath is set, checks it against
// that model; every problem is bad input (exit 2).
func loadPlan(path, modelPath string, stdin io.Reader) (*plan.Plan, error) {
	data, path, err := readInput(path, stdin)
	if err != nil {
		return nil, err
	}
	var g *dag.Graph
	if modelPath != "" {
		if g, err = loadModel(modelPath, stdin); err != nil {
			return nil, err
		}
	}
	return decodePlan(data, path, g, modelPath)
}

// decodePlan reads a plan and, when g is not nil, checks it against that
// model (plan.LoadPlan): made for it, every op in one stage, edges that
// carry what the stages read. Problems are exit 2, naming the file.
func decodePlan(data []byte, path string, g *dag.Graph, modelPath string) (*plan.Plan, error) {
	p, err := plan.LoadPlan(data, g)
	var mm *plan.ModelMismatchError
	if errors.As(err, &mm) {
		return nil, inputf("%s: the plan was made for another model than %s (the plan says hash %.12s, this model's is %.12s)", path, modelPath, mm.PlanHash, mm.ModelHash)
	}
	if err != nil {
		return nil, inputf("%s: %v", path, err)
	}
	return p, nil
}

// stateLines are explain's words on where the stages' optimizer state
// lives, a line per placement naming its stages, what it saves a device
// (the most of any of them) and copies over the host link per iteration
// (all of them together), where some stage's is not replicated (none
// otherwise: every plan before placements, and those that place none).
func stateLines(p *plan.Plan) []string {
	if !p.Placed() {
		return nil
	}
	type group struct {
		ids         []int
		saved, host int64
	}
	var order []string
	groups := map[string]*group{}
	for _, s := range p.Stages {
		w := s.StateWords()
		g := groups[w]
		if g == nil {
			g = &group{}
			groups[w], order = g, append(order, w)
		}
		g.ids, g.saved, g.host = append(g.ids, s.ID), max(g.saved, s.StateSavedBytes), g.host+s.HostCopyBytes
	}
	var out []string
	for _, w := range order {
		g := groups[w]
		line := fmt.Sprintf("optimizer state %s: %s", w, stageIDs(g.ids))
		var more []string
		if g.saved > 0 {
			more = append(more, "up to "+plan.GBWord(g.saved)+" less per device")
		}
		if g.host > 0 {
			more = append(more, plan.GBWord(g.host)+" over the host link per iteration")
		}
		if len(more) > 0 {
			line += " (" + strings.Join(more, ", ") + ")"
		}
		out = append(out, line)
	}
	if p.Streams() {
		out = append(out, "graphpipe run does not stream weights from host memory: it refuses this plan (a search for a run plans without streaming)")
	}
	return out
}

// ringLines are explain's words on how the stages of several replicas
// run their rings (plan.RingLayout) and what of them overlaps compute: a
// line per kind, naming its stages; none where no stage has replicas.
func ringLines(p *plan.Plan) []string {
	var out []string
	levels := map[[2]int][]int{}
	var shapes [][2]int
	var buckets, late, lateBuckets []int
	var wait float64
	for i, s := range p.Stages {
		if len(s.Devices) < 2 {
			continue
		}
		if n, l := p.RingLayout(i); n >= 2 {
			if levels[[2]int{n, l}] == nil {
				shapes = append(shapes, [2]int{n, l})
			}
			levels[[2]int{n, l}] = append(levels[[2]int{n, l}], s.ID)
		}
		if s.BucketBytes > 0 {
			buckets = append(buckets, s.ID)
		}
		switch {
		case s.GatherBucketBytes > 0:
			lateBuckets, wait = append(lateBuckets, s.ID), max(wait, s.GatherS)
		case s.GatherS > 0:
			late = append(late, s.ID)
		}
	}
	for _, nl := range shapes {
		out = append(out, fmt.Sprintf("in two levels, within each node and then across %d nodes of %d: %s", nl[0], nl[1], stageIDs(levels[nl])))
	}
	if len(buckets) > 0 {
		out = append(out, "all-reduce in buckets during the last weight pass: "+stageIDs(buckets))
	}
	if len(late) > 0 {
		out = append(out, "all-gather after the update run late, the first forward waiting for it: "+stageIDs(late))
	}
	if len(lateBuckets) > 0 {
		out = append(out, fmt.Sprintf("all-gather after the update run late in buckets, each op of the first forward waiting for its own (%.3g s at most): %s", wait, stageIDs(lateBuckets)))
	}
	return out
}

// stageIDs is "stage 3" or "stages 0, 1, 4".
func stageIDs(ids []int) string {
	words := make([]string, len(ids))
	for i, id := range ids {
		words[i] = fmt.Sprint(id)
	}
	if len(ids) == 1 {
		return "stage " + words[0]
	}
	return "stages " + strings.Join(words, ", ")
}

// recomputing names the stages of p that recompute ("stages 0, 3"), or "".
func recomputing(p *plan.Plan) string {
	var ids []string
	for _, s := range p.Stages {
		if s.Recompute {
			ids = append(ids, fmt.Sprint(s.ID))
		}
	}
	switch len(ids) {
	case 0:
		return ""
	case 1:
		return "stage " + ids[0]
	}
	return "stages " + strings.Join(ids, ", ")
}

// stageFactors says what the stages' ops are slowed by for the workers
// busy beside them: one factor where every stage meets the same, else
// their range.
func stageFactors(p *plan.Plan) string {
	lo, hi := math.Inf(1), 0.0
	for _, st := range p.Stages {
		lo, hi = min(lo, st.Slowdown), max(hi, st.Slowdown)
	}
	if hi-lo <= 5e-4*hi {
		return fmt.Sprintf("every op ×%.3g", hi)
	}
	return fmt.Sprintf("ops ×%.3g to ×%.3g, stage by stage,", lo, hi)
}
