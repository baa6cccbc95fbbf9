package bench

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/search"
)

// Result is one planner's plan, or why there is none.
type Result struct {
	SamplesPerS float64
	MicroBatch  int64
	Stages      int
	Depth       int
	SearchS     float64
	Err         string
}

// Row compares the planners on one model, device count and batch.
type Row struct {
	Model      string
	Device     string
	Devices    int
	Batch      int64
	MicroBatch int64  // forced on both planners; 0: free
	Schedule   string // both planners'
	GPP, SPP   Result
	Exact      *Result // spp-exact, when asked for
}

// Ratio is gpp's throughput over spp's, 0 if either has no plan.
func (r Row) Ratio() float64 {
	if r.GPP.SamplesPerS == 0 || r.SPP.SamplesPerS == 0 {
		return 0
	}
	return r.GPP.SamplesPerS / r.SPP.SamplesPerS
}

// Paper builds a zoo model at the paper's configuration.
func Paper(name string) (*dag.Graph, error) {
	e, err := models.Lookup(name)
	if err != nil {
		return nil, err
	}
	return e.Build(e.Default)
}

func options(device string, devices int, batch, micro int64, strategy, schedule string) search.Options {
	dev := plan.Profiles[device]
	return search.Options{Device: dev, Devices: devices, Batch: batch, MicroBatch: micro, Strategy: strategy, Schedule: schedule}
}

func run(g *dag.Graph, o search.Options) Result {
	p, err := search.Search(g, o)
	if err != nil {
		return Result{Err: err.Error()}
	}
	return Result{SamplesPerS: p.Predicted.SamplesPerS, MicroBatch: p.MicroBatch, Stages: len(p.Stages), Depth: p.Predicted.Depth, SearchS: p.Search.Seconds}
}

// MemoryBatch is the batch rule of the package doc: the largest power of two
// up to 65536 at which spp with GPipe fits keeping every activation (no
// recomputation), or 0 if none does.
func MemoryBatch(g *dag.Graph, device string, devices int) int64 {
	best := int64(0)
	for b := int64(1); b <= 65536; b *= 2 {
		o := options(device, devices, b, 0, "spp", "gpipe")
		o.Recompute = "off" // the rule's memory limit is the activations kept
		_, err := search.Search(g, o)
		var np *search.NoPlanError
		if errors.As(err, &np) {
			break
		}
		if err == nil {
			best = b
		}
	}
	return best
}

// Compare runs gpp and spp (and spp-exact if exact) on one configuration
// with the default schedule, 1f1b.
func Compare(g *dag.Graph, device string, devices int, batch, micro int64, exact bool) Row {
	return CompareWith(g, device, devices, batch, micro, "1f1b", exact)
}

// CompareWith is Compare with both planners on the named schedule.
func CompareWith(g *dag.Graph, device string, devices int, batch, micro int64, schedule string, exact bool) Row {
	r := Row{Model: g.Name(), Device: device, Devices: devices, Batch: batch, MicroBatch: micro, Schedule: schedule}
	r.GPP = run(g, options(device, devices, batch, micro, "gpp", schedule))
	r.SPP = run(g, options(device, devices, batch, micro, "spp", schedule))
	if exact {
		e := run(g, options(device, devices, batch, micro, "spp-exact", schedule))
		r.Exact = &e
	}
	return r
}

// Table renders rows as a Markdown table.
func Table(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "model\tschedule\tdevices\tbatch\tgpp samples/s\tspp samples/s\tgpp/spp\tgpp b, stages, depth\tspp b, stages, depth\tgpp search s\tspp-exact")
	for _, r := range rows {
		ex := "-"
		if r.Exact != nil {
			if r.Exact.Err != "" {
				ex = "stopped: " + strings.SplitN(r.Exact.Err, ":", 3)[1]
			} else {
				ex = fmt.Sprintf("%.4g samples/s in %.2f s", r.Exact.SamplesPerS, r.Exact.SearchS)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.4g\t%.4g\t%.3f\t%d, %d, %d\t%d, %d, %d\t%.2f\t%s\n", r.Model, r.Schedule, r.Devices, r.Batch,
			r.GPP.SamplesPerS, r.SPP.SamplesPerS, r.Ratio(), r.GPP.MicroBatch, r.GPP.Stages, r.GPP.Depth,
			r.SPP.MicroBatch, r.SPP.Stages, r.SPP.Depth, r.GPP.SearchS, ex)
	}
	tw.Flush()
}
