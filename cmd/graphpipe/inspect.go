package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/dag"
)

// inspectReport is `graphpipe inspect --json`'s document. FLOPs and bytes are
// per sample; parameters are counts of numbers.
type inspectReport struct {
	Format              string         `json:"format"` // inspectFormat
	Name                string         `json:"name"`
	BatchSize           int64          `json:"batch_size"`
	Seed                int64          `json:"seed"`
	Ops                 int            `json:"ops"`
	Inputs              int            `json:"inputs"`
	Params              int64          `json:"params"`
	ParamBytes          int64          `json:"param_bytes"`
	FwdFLOPs            float64        `json:"fwd_flops_per_sample"`
	BwdFLOPs            float64        `json:"bwd_flops_per_sample"`
	BwdInputFLOPs       float64        `json:"bwd_input_flops_per_sample"`
	BwdWeightFLOPs      float64        `json:"bwd_weight_flops_per_sample"`
	ActivationBytes     int64          `json:"activation_bytes_per_sample"`
	StashBytes          int64          `json:"stash_bytes_per_sample"`
	Loss                string         `json:"loss"`
	Kinds               map[string]int `json:"op_kinds"`
	ParallelSections    []sectionJSON  `json:"parallel_sections"`
	MaxParallelBranches int            `json:"max_parallel_branches"`
	OpList              []opJSON       `json:"op_list"`
}

type sectionJSON struct {
	After    string       `json:"after"`
	Join     string       `json:"join"`
	Branches []branchJSON `json:"branches"`
}

// branchJSON is a dag.Branch in the report's snake_case.
type branchJSON struct {
	First    string  `json:"first"` // in topological order
	Last     string  `json:"last"`
	Ops      int     `json:"ops"`
	FwdFLOPs float64 `json:"fwd_flops_per_sample"`
	Params   int64   `json:"params"`
}

type opJSON struct {
	Name       string    `json:"name"`
	Op         dag.Kind  `json:"op"`
	Shape      dag.Shape `json:"shape"`
	DType      dag.DType `json:"dtype"`
	Params     int64     `json:"params"`
	FwdFLOPs   float64   `json:"fwd_flops"`
	BwdFLOPs   float64   `json:"bwd_flops"`
	OutBytes   int64     `json:"out_bytes"`
	StashBytes int64     `json:"stash_bytes"`
}

func report(g *dag.Graph) *inspectReport {
	t := g.Total()
	r := &inspectReport{
		Format: inspectFormat, Name: g.Name(), BatchSize: g.BatchSize(), Seed: g.Seed(), Ops: g.NumOps(), Inputs: len(g.Inputs()),
		Params: t.Params, ParamBytes: 4 * t.Params, FwdFLOPs: t.FwdFLOPs, BwdFLOPs: t.BwdFLOPs(),
		BwdInputFLOPs: t.BwdInputFLOPs, BwdWeightFLOPs: t.BwdWeightFLOPs,
		ActivationBytes: t.OutBytes, StashBytes: t.StashBytes, Loss: g.Op(g.Loss()).Name,
		Kinds: map[string]int{}, ParallelSections: []sectionJSON{}, OpList: []opJSON{},
	}
	for _, s := range g.Branches() {
		sec := sectionJSON{After: s.After, Join: s.Join}
		for _, b := range s.Branches {
			sec.Branches = append(sec.Branches, branchJSON(b))
		}
		r.ParallelSections = append(r.ParallelSections, sec)
		r.MaxParallelBranches = max(r.MaxParallelBranches, len(s.Branches))
	}
	for _, i := range g.Order() {
		op, c, out := g.Op(i), g.Cost(i), g.Out(i)
		r.Kinds[string(op.Kind)]++
		r.OpList = append(r.OpList, opJSON{op.Name, op.Kind, out.Shape, out.DType, c.Params, c.FwdFLOPs, c.BwdFLOPs(), c.OutBytes, c.StashBytes})
	}
	return r
}

func newInspectCmd(stdin io.Reader) *cobra.Command {
	var asJSON, ops bool
	cmd := &cobra.Command{
		Use:   "inspect MODEL",
		Short: "Summarise a model: ops, parameters, FLOPs and activations per sample, parallel branches",
		Long: `Summarise a model file: its ops, parameters, FLOPs and activation bytes per
sample, and the parallel branches found (sections of the graph where branches
run side by side between two ops that every op comes before or after).
MODEL may be - for standard input.`,
		Args: args("MODEL"),
		RunE: func(cmd *cobra.Command, a []string) error {
			g, err := loadModel(a[0], stdin)
			if err != nil {
				return err
			}
			r := report(g)
			w := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			printReport(w, r, ops)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object (includes every op)")
	cmd.Flags().BoolVar(&ops, "ops", false, "list every op in topological order")
	return cmd
}

func printReport(w io.Writer, r *inspectReport, ops bool) {
	fmt.Fprintf(w, "model       %s (batch %d, seed %d)\n", r.Name, r.BatchSize, r.Seed)
	fmt.Fprintf(w, "ops         %d, %d inputs, loss %q\n", r.Ops, r.Inputs, r.Loss)
	fmt.Fprintf(w, "parameters  %s (%s in fp32)\n", count(float64(r.Params)), bytesText(r.ParamBytes))
	fmt.Fprintf(w, "per sample  forward %sFLOP, backward %sFLOP (inputs %s, weights %s)\n",
		count(r.FwdFLOPs), count(r.BwdFLOPs), count(r.BwdInputFLOPs), count(r.BwdWeightFLOPs))
	fmt.Fprintf(w, "            activations %s, stashed for backward %s\n", bytesText(r.ActivationBytes), bytesText(r.StashBytes))
	kinds := make([]string, 0, len(r.Kinds))
	for k := range r.Kinds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	fmt.Fprint(w, "op kinds   ")
	for _, k := range kinds {
		fmt.Fprintf(w, " %s×%d", k, r.Kinds[k])
	}
	fmt.Fprintln(w)
	if len(r.ParallelSections) == 0 {
		fmt.Fprintln(w, "branches    none: the model is sequential")
	}
	for _, s := range r.ParallelSections {
		where := "at the start"
		if s.After != "" {
			where = fmt.Sprintf("after %q", s.After)
		}
		join := "the end"
		if s.Join != "" {
			join = fmt.Sprintf("%q", s.Join)
		}
		fmt.Fprintf(w, "branches    %d in parallel %s, joining at %s\n", len(s.Branches), where, join)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, b := range s.Branches {
			fmt.Fprintf(tw, "              %s .. %s\t%d ops\t%sFLOP\t%s params\n", b.First, b.Last, b.Ops, count(b.FwdFLOPs), count(float64(b.Params)))
		}
		tw.Flush()
	}
	if ops {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "\nOP\tKIND\tSHAPE\tPARAMS\tFWD FLOP\tBWD FLOP\tSTASH")
		for _, o := range r.OpList {
			fmt.Fprintf(tw, "%s\t%s\t%v\t%d\t%s\t%s\t%s\n", o.Name, o.Op, o.Shape, o.Params, count(o.FwdFLOPs), count(o.BwdFLOPs), bytesText(o.StashBytes))
		}
		tw.Flush()
	}
}

// count renders a number with an SI prefix: 1.23 G.
func count(v float64) string {
	for _, u := range []struct {
		scale float64
		sym   string
	}{{1e15, "P"}, {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if v >= u.scale {
			return fmt.Sprintf("%.3g %s", v/u.scale, u.sym)
		}
	}
	return fmt.Sprintf("%.4g ", v)
}

func bytesText(b int64) string {
	v := float64(b)
	for _, u := range []struct {
		scale float64
		sym   string
	}{{1 << 40, "TiB"}, {1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if v >= u.scale {
			return fmt.Sprintf("%.3g %s", v/u.scale, u.sym)
		}
	}
	return fmt.Sprintf("%d B", b)
}
