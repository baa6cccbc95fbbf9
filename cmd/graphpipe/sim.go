package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/chart"
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/plan"
)

// modelFlagHelp is sim's and explain's --model.
const modelFlagHelp = "check the plan against the model `FILE` it was made for (every op in one stage, edges that carry what each stage reads)"

func newSimCmd(stdin io.Reader) *cobra.Command {
	var asJSON, grid bool
	var trace, svg, measured, modelPath string
	cmd := &cobra.Command{
		Use:   "sim PLAN",
		Short: "Simulate a plan: iteration time, busy and idle time per stage, bubbles, memory",
		Long: `Run a plan's schedule through the discrete-event simulator. --trace writes the
timeline as Chrome trace JSON (open it in Perfetto), --svg as a picture (and
--measured TRACE, what run --trace wrote for this plan, draws the measured
timeline under it), --grid prints the schedule as a step × stage grid.`,
		Args: args("PLAN"),
		RunE: func(cmd *cobra.Command, a []string) error {
			p, err := loadPlan(a[0], modelPath, stdin)
			if err != nil {
				return err
			}
			res, err := p.Simulate()
			if err != nil {
				return inputf("%s: %v", a[0], err)
			}
			names := p.StageNames()
			ts := []chart.Timeline{{Title: "simulated: " + planTitle(p), Rows: names, Result: res}}
			if measured != "" {
				if svg == "" {
					return usagef("--measured: draws under the simulated timeline: give --svg FILE")
				}
				title, m, err := readMeasured(measured, p)
				if err != nil {
					return err
				}
				ts = append(ts, chart.Timeline{Title: title, Rows: names, Result: m})
			}
			if trace != "" {
				if err := writeOutput(cmd, "--trace", trace, microbatch.Trace(res, len(p.Stages), names)); err != nil {
					return err
				}
			}
			if svg != "" {
				pic, err := drawTimelines("--svg", svg, chart.SVG, ts...)
				if err != nil {
					return err
				}
				if err := writeOutput(cmd, "--svg", svg, pic); err != nil {
					return err
				}
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return json.NewEncoder(w).Encode(map[string]any{
					"format": simFormat, "iteration_s": res.Iteration, "samples_per_s": float64(p.BatchSize) / res.Iteration,
					"bubble_fraction": res.Bubble, "busy_s": res.Busy, "idle_s": res.Idle,
					"in_flight": res.InFlight, "peak_memory_bytes": res.PeakMemory,
				})
			}
			fmt.Fprintf(w, "iteration %.4g s, %.4g samples/s, bubble %.1f%%\n", res.Iteration, float64(p.BatchSize)/res.Iteration, 100*res.Bubble)
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "STAGE\tDEVICES\tBUSY S\tIDLE S\tIN FLIGHT\tPEAK GB\tRECOMPUTE")
			for s := range p.Stages {
				fmt.Fprintf(tw, "%d\t%d\t%.4g\t%.4g\t%d\t%.3g\t%s\n", s, len(p.Stages[s].Devices), res.Busy[s], res.Idle[s], res.InFlight[s], float64(res.PeakMemory[s])/1e9, yesNo(p.Stages[s].Recompute))
			}
			tw.Flush()
			if grid {
				sch, _ := p.ScheduleOf()
				g, err := microbatch.Grid(sch)
				if err != nil {
					return err
				}
				fmt.Fprint(w, "\n"+g)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&modelPath, "model", "", modelFlagHelp)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	cmd.Flags().BoolVar(&grid, "grid", false, "print the schedule as a step × stage grid")
	cmd.Flags().StringVar(&trace, "trace", "", "write the timeline as Chrome trace JSON to `FILE`")
	cmd.Flags().StringVar(&svg, "svg", "", "draw the timeline as SVG in `FILE`")
	cmd.Flags().StringVar(&measured, "measured", "", "with --svg: draw the measured timeline in `TRACE` (what run --trace wrote for this plan) under the simulated one")
	return cmd
}

func newExplainCmd(stdin io.Reader) *cobra.Command {
	var dot bool
	var svg, modelPath string
	cmd := &cobra.Command{
		Use:   "explain PLAN",
		Short: "Describe a plan: stages, devices, micro-batch, depth, memory per device",
		Args:  args("PLAN"),
		RunE: func(cmd *cobra.Command, a []string) error {
			p, err := loadPlan(a[0], modelPath, stdin)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if svg != "" {
				if err := writeOutput(cmd, "--svg", svg, p.SVG()); err != nil {
					return err
				}
			}
			if dot {
				_, err := w.Write(p.DOT())
				return err
			}
			printSummary(w, p)
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			kind := func(plan.PlanStage) string { return "" } // a column on a cluster of several kinds
			head := "\nSTAGE\tDEVICES\tMICRO-BATCH/DEVICE\tIN FLIGHT\tFWD S\tBWD S\tWGRAD S\tPEAK GB\tRECOMPUTE\tOPS"
			if p.Cluster != nil {
				kind = func(s plan.PlanStage) string { return s.Kind + "\t" }
				head = strings.Replace(head, "DEVICES\t", "DEVICES\tKIND\t", 1)
			}
			fmt.Fprintln(tw, head)
			for _, s := range p.Stages {
				ops := s.Ops[0]
				if len(s.Ops) > 1 {
					ops = fmt.Sprintf("%s .. %s (%d)", s.Ops[0], s.Ops[len(s.Ops)-1], len(s.Ops))
				}
				wgrad := "-" // in BWD S unless the schedule splits the backward
				if s.WeightS > 0 {
					wgrad = fmt.Sprintf("%.3g", s.WeightS)
				}
				fmt.Fprintf(tw, "%d\t%s\t%s%d\t%d\t%.3g\t%.3g\t%s\t%.3g\t%s\t%s\n", s.ID, plan.DeviceList(s.Devices), kind(s), s.MicroBatch, s.InFlight, s.ForwardS, s.BackwardS, wgrad, float64(s.PeakBytes)/1e9, yesNo(s.Recompute), ops)
			}
			tw.Flush()
			if len(p.Edges) > 0 {
				fmt.Fprintln(w, "\nedges")
				for _, e := range p.Edges {
					fmt.Fprintf(w, "  %d -> %d  %d tensor(s), %d bytes/sample%s\n", e.From, e.To, len(e.Tensors), e.Bytes, edgeLink(e))
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&modelPath, "model", "", modelFlagHelp)
	cmd.Flags().BoolVar(&dot, "dot", false, "print the stage DAG in Graphviz's DOT language")
	cmd.Flags().StringVar(&svg, "svg", "", "write the stage DAG as SVG to `FILE`")
	return cmd
}

// yesNo is a recompute column's entry: "yes" (BWD S includes the rerun
// forward) or "-".
func yesNo(on bool) string {
	if on {
		return "yes"
	}
	return "-"
}

// edgeLink is how explain says an edge's link: its transport and a
// micro-batch's transfer each way ("" for a plan that records no
// transport).
func edgeLink(e plan.PlanEdge) string {
	if e.Transport == "" {
		return ""
	}
	if e.GradTransfer > 0 { // selective backprop: the kept rows' gradients alone
		return fmt.Sprintf(", %s, %.3g s per micro-batch of activations, %.3g s of the kept rows' gradients", e.Transport, e.Transfer, e.GradTransfer)
	}
	return fmt.Sprintf(", %s, %.3g s per micro-batch each way", e.Transport, e.Transfer)
}
