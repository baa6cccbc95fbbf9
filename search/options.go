package search

import (
	"fmt"
	"math/bits"
	"strings"

	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/plan"
)

// Options are what a search is asked for.
type Options struct {
	Strategy       string // "gpp" (default), "spp" or "spp-exact"
	Schedule       string // "1f1b" (default), "1f1b-depth", "zb", "gpipe", "2bw" (microbatch.Names) or AutoAsync (twobw.go)
	Device         plan.Device
	Devices        int
	DevicesPerNode int   // default 4
	MemoryLimit    int64 // bytes per device; 0: the device's memory
	Batch          int64 // global mini-batch; 0: the model's batch_size
	MicroBatch     int64 // force one micro-batch size; 0: the planner chooses
	OptimizerBytes int64 // optimizer state per parameter (stage.StateBytes); 0: 8 (Adam's two moments); NoOptimizerState: none
	MaxSeries      int   // coarsening: most children of a series node; 0: 32
	MaxUnits       int   // spp: most units in the topological order; 0: 128
	MaxDownsets    int   // spp-exact: most downsets it enumerates; 0: 4096
	// OpTimes, when set, prices every op's compute from times measured on
	// the model itself (graphpipe profile --model) instead of from the
	// device's FLOP rate; it must belong to the graph searched.
	OpTimes *plan.OpTimes
	// Cluster, when set, is the devices: groups of nodes of several kinds
	// (plan.DecodeCluster); Device, Devices and DevicesPerNode then follow
	// from it (the first kind's, and all of them), and MemoryLimit, when
	// set, bounds every kind. A cluster of one kind is the same as Device,
	// Devices and DevicesPerNode.
	Cluster *plan.Cluster
	// Recompute is activation recomputation: "auto" (default) lets the
	// planners make a stage rerun its forward during backward where that
	// buys a faster plan (memory binds); "off" never; "all" makes every
	// stage recompute. Schedules that split the backward (zb) never
	// recompute.
	Recompute string
	// Precision is what the plan is priced in (plan.Precisions): "" or
	// "fp32" (default), "tf32", "bf16"; the devices must have its rate.
	Precision string
	// Attention is how attention runs on the device: "" or "unfused"
	// (default: its products as GEMMs, the scores stored), or "fused"
	// (plan.Attentions: the scores never stored, computed on the CUDA
	// cores and again in the backward).
	Attention string
	// OptimizerState is where each stage's optimizer state may live:
	// "auto" (default: sharded across a stage's replicas where it has
	// more than one, and spilled to host memory where that is what makes
	// it fit), "replicated" (every replica holds all of it, as before),
	// "sharded" (across a stage's replicas where it has more than one),
	// "host" (every stage's in host memory, stepped on the host). See
	// state.go.
	OptimizerState string
	// NoStreaming keeps every stage's weights on its devices: a spilled
	// stage never streams them from host memory. The runtime does not
	// stream weights, so a search for a run sets it.
	NoStreaming bool
	// NoOverlap prices every stage's all-reduce after its last weight pass
	// of an iteration, and a sharded stage's all-gather in its flush, as
	// plans were before buckets; by default a stage of several replicas
	// all-reduces in buckets while that pass runs where that shortens its
	// flush (overlap.go; plan.PlanStage.BucketBytes), and a sharded stage
	// all-gathers as its next iteration begins where that makes the plan
	// faster (plan.PlanStage.GatherS).
	NoOverlap bool
	// BackpropFraction, for selective backprop, is the fraction of samples
	// expected to have a backward pass (stage.Selective.Fraction, or one
	// measured): the backward passes and gradient messages are priced at
	// it (selective.go); 0: every sample.
	BackpropFraction float64
	// FlushOnly, when set, is why the run the plan is for cannot train
	// without a flush (a backend that keeps one version of the weights):
	// a schedule without one (2bw) is refused, naming it, and AutoAsync
	// weighs the synchronous schedule alone. The search finds the model's
	// own reasons itself (flushOnly).
	FlushOnly string

	// sched is Schedule's description, which withDefaults looks up: what
	// the search decides by the schedule, it reads here
	sched microbatch.ScheduleKind
}

// NoOptimizerState is Options.OptimizerBytes for an optimizer that keeps
// no state (0 means Adam's 8 bytes).
const NoOptimizerState = -1

// OptionError is an option the search cannot use; Flag names it.
type OptionError struct {
	Flag, Msg string
}

func (e *OptionError) Error() string { return fmt.Sprintf("--%s: %s", e.Flag, e.Msg) }

// NoPlanError says that no plan fits, and which limit failed. Bound marks
// a refusal before any search (refuse.go): a bound that needs no plan rules
// every plan out, and Op (the op at fault), Need and Limit (bytes) say which;
// the model cannot fit these devices as given. Without Bound, the search
// found nothing, and Op, Need and Limit may be empty.
type NoPlanError struct {
	Reason      string
	Op          string
	Need, Limit int64
	Bound       bool
}

func (e *NoPlanError) Error() string { return "no plan fits: " + e.Reason }

func (o Options) withDefaults(modelBatch int64) (Options, error) {
	if o.Cluster != nil {
		var err error
		if o, err = o.clusterDefaults(); err != nil {
			return o, err
		}
	}
	if o.Strategy == "" {
		o.Strategy = "gpp"
	}
	if o.Schedule == "" {
		o.Schedule = "1f1b"
	}
	if o.DevicesPerNode == 0 {
		o.DevicesPerNode = 4
	}
	if o.MemoryLimit == 0 {
		o.MemoryLimit = o.Device.Memory
	}
	if o.Batch == 0 {
		o.Batch = modelBatch
	}
	switch o.OptimizerBytes {
	case 0:
		o.OptimizerBytes = 8
	case NoOptimizerState:
		o.OptimizerBytes = 0
	}
	if o.MaxSeries == 0 {
		o.MaxSeries = 32
	}
	if o.MaxUnits == 0 {
		o.MaxUnits = 128
	}
	if o.MaxDownsets == 0 {
		o.MaxDownsets = 4096
	}
	if o.Recompute == "" {
		o.Recompute = "auto"
	}
	if o.OptimizerState == "" {
		o.OptimizerState = StateAuto
	}
	if err := checkState(o.OptimizerState); err != nil {
		return o, err
	}
	sched, schedErr := microbatch.KindOf(o.Schedule)
	switch {
	case o.Strategy != "gpp" && o.Strategy != "spp" && o.Strategy != "spp-exact":
		return o, &OptionError{"strategy", fmt.Sprintf("unknown strategy %q (known: gpp, spp, spp-exact)", o.Strategy)}
	case schedErr != nil:
		return o, &OptionError{"schedule", schedErr.Error()}
	case o.Recompute != "auto" && o.Recompute != "off" && o.Recompute != "all":
		return o, &OptionError{"recompute", fmt.Sprintf("unknown choice %q (known: auto, off, all)", o.Recompute)}
	case o.Recompute == "all" && sched.Split:
		return o, &OptionError{"recompute", fmt.Sprintf("schedule %s defers weight gradients past the backward, which recomputation does not fit: use %s", o.Schedule, unsplit())}
	case o.Devices < 1 || o.Devices > plan.MaxDevices:
		return o, &OptionError{"devices", fmt.Sprintf("must be between 1 and %d, got %d", plan.MaxDevices, o.Devices)}
	case o.DevicesPerNode < 1:
		return o, &OptionError{"devices-per-node", fmt.Sprintf("must be positive, got %d", o.DevicesPerNode)}
	case o.OptimizerBytes < 0:
		return o, &OptionError{"optimizer", fmt.Sprintf("optimizer state of %d bytes per parameter", o.OptimizerBytes)}
	case o.MemoryLimit < 0:
		return o, &OptionError{"memory-gb", "must be positive"}
	case o.Batch < 1:
		return o, &OptionError{"batch", fmt.Sprintf("must be positive, got %d", o.Batch)}
	case o.MicroBatch < 0:
		return o, &OptionError{"micro-batch", fmt.Sprintf("must be positive, got %d", o.MicroBatch)}
	case o.MicroBatch > 0 && o.Batch%o.MicroBatch != 0:
		return o, &OptionError{"micro-batch", fmt.Sprintf("%d does not divide the batch of %d", o.MicroBatch, o.Batch)}
	case o.MicroBatch > 0 && o.Batch/o.MicroBatch > plan.MicroBatchLimit:
		return o, &OptionError{"micro-batch", fmt.Sprintf("%d makes %d micro-batches per iteration, over the %d a plan may have (every stage's action list holds each); pass a larger one",
			o.MicroBatch, o.Batch/o.MicroBatch, plan.MicroBatchLimit)}
	}
	if err := o.Device.Validate(); err != nil {
		return o, &OptionError{"device", err.Error()}
	}
	if err := o.precisionDefaults(); err != nil {
		return o, err
	}
	if o.Attention == "" {
		o.Attention = plan.Unfused
	}
	if err := plan.CheckAttention(o.Attention); err != nil {
		return o, &OptionError{"attention", err.Error()}
	}
	if err := o.checkBackpropFraction(); err != nil {
		return o, err
	}
	o.sched = sched
	return o, nil
}

// unsplit lists the schedules that do not split the backward, as "a, b
// or c": those recomputation fits.
func unsplit() string {
	var names []string
	for _, k := range microbatch.Kinds() {
		if !k.Split {
			names = append(names, k.Name)
		}
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// clusterDefaults takes Device, Devices and DevicesPerNode from the
// cluster, and each kind's memory limit from MemoryLimit where it is set;
// a cluster of one kind becomes those options alone.
func (o Options) clusterDefaults() (Options, error) {
	c := *o.Cluster
	c.Kinds = append([]plan.Kind(nil), c.Kinds...)
	if len(c.Kinds) == 0 {
		return o, &OptionError{"cluster", "no devices"}
	}
	for t := range c.Kinds {
		k := &c.Kinds[t]
		if err := k.Device.Validate(); err != nil {
			return o, &OptionError{"cluster", err.Error()}
		}
		if k.Devices < 1 || k.DevicesPerNode < 1 {
			return o, &OptionError{"cluster", fmt.Sprintf("kind %s: %d devices, %d per node: both must be positive", k.Name(), k.Devices, k.DevicesPerNode)}
		}
		if k.MemoryLimit = k.Device.Memory; o.MemoryLimit > 0 {
			k.MemoryLimit = o.MemoryLimit
		}
	}
	first := c.Kinds[0]
	o.Device, o.Devices, o.DevicesPerNode, o.MemoryLimit = first.Device, c.Total(), first.DevicesPerNode, first.MemoryLimit
	o.Cluster = &c
	switch {
	case len(c.Kinds) == 1:
		o.Cluster = nil
	case o.OpTimes != nil:
		return o, &OptionError{"op-times", "op times are measured on one device: not for a cluster of several kinds"}
	case o.Strategy == "spp-exact":
		return o, &OptionError{"strategy", "spp-exact plans devices of one kind: use gpp or spp on a cluster of several kinds"}
	}
	return o, nil
}

// mayRecompute says whether the planners may choose to recompute a stage.
func (o *Options) mayRecompute() bool {
	return o.Recompute == "auto" && !o.sched.Split
}

// MaxMicroBatches bounds the micro-batches per iteration the planner tries
// first: past it a pipeline's fill and drain are under 0.1% of the iteration
// per stage of depth, while smaller calls only add overhead. Only when no plan
// fits at those sizes does Search try smaller ones, halving, up to
// MicroBatchLimit micro-batches per iteration.
const MaxMicroBatches = 1024

// microBatches lists the micro-batch sizes to try: the forced one, or every
// power of two that divides the batch into at most MaxMicroBatches, and the
// batch itself.
func (o Options) microBatches() []int64 {
	if o.MicroBatch > 0 {
		return []int64{o.MicroBatch}
	}
	var out []int64
	// b > 0: doubling past 2^62 overflows (a batch that large is refused
	// later, as fitting nowhere)
	for b := int64(1); b > 0 && b <= o.Batch; b *= 2 {
		if o.Batch%b == 0 && o.Batch/b <= MaxMicroBatches {
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		out = append(out, o.Batch)
	}
	if out[len(out)-1] != o.Batch {
		out = append(out, o.Batch)
	}
	return out
}

// smallerMicroBatches lists, largest first, the powers of two below every
// size of microBatches that divide the batch into at most MicroBatchLimit.
func (o Options) smallerMicroBatches() []int64 {
	if o.MicroBatch > 0 {
		return nil
	}
	var out []int64
	if first := o.microBatches()[0]; first > 1 {
		// from the largest power of two below first, halving
		for b := int64(1) << (63 - bits.LeadingZeros64(uint64(first-1))); b >= 1 && o.Batch/b <= plan.MicroBatchLimit; b /= 2 {
			if o.Batch%b == 0 {
				out = append(out, b)
			}
		}
	}
	return out
}

// precisionDefaults makes "" fp32 and refuses a precision that is not one,
// or that a device of the search (every kind of a cluster) has no rate for.
func (o *Options) precisionDefaults() error {
	if o.Precision == "" {
		o.Precision = "fp32"
	}
	if err := plan.CheckPrecision(o.Precision); err != nil {
		return &OptionError{"precision", err.Error()}
	}
	devs := []plan.Device{o.Device}
	if o.Cluster != nil {
		devs = devs[:0]
		for _, k := range o.Cluster.Kinds {
			devs = append(devs, k.Device)
		}
	}
	for _, d := range devs {
		if _, err := d.InPrecision(o.Precision); err != nil {
			return &OptionError{"precision", err.Error()}
		}
	}
	return nil
}
