package main

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/models"
)

func newModelsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "models",
		Short: "List and export the model zoo",
		Args:  args(),
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newModelsListCmd(), newModelsExportCmd())
	return cmd
}

func newModelsListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the zoo's models and the flags each takes",
		Args:  args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tDESCRIPTION\tFLAGS")
			for _, e := range models.List() {
				flags := make([]string, len(e.Knobs))
				for i, k := range e.Knobs {
					flags[i] = "--" + k
				}
				fmt.Fprintf(w, "%s\t%s\t%s\n", e.Name, e.Description, strings.Join(flags, " "))
			}
			return w.Flush()
		},
	}
}

func newModelsExportCmd() *cobra.Command {
	var out, preset string
	knobs := models.Knobs()
	vals := make([]int64, len(knobs))
	cmd := &cobra.Command{
		Use:   "export NAME [flags]",
		Short: "Write a zoo model as a graphpipe/model@1 file",
		Long: `Write a zoo model as a graphpipe/model@1 file, to stdout or to -o FILE.
Defaults are the paper's configuration; --preset small gives a model that trains
in seconds on a CPU. Flags override the preset; 'graphpipe models list' says
which flags each model takes.`,
		Example: "  graphpipe models export mmt -o mmt.json\n  graphpipe models export dlrm --preset small --branches 2 -o dlrm-small.json",
		Args:    args("NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			e, err := models.Lookup(a[0])
			if err != nil {
				return usagef("%v", err)
			}
			cfg, err := e.Preset(preset)
			if err != nil {
				return usagef("--preset: %v", err)
			}
			for i, k := range knobs {
				if !cmd.Flags().Changed(k.Name) {
					continue
				}
				if !slices.Contains(e.Knobs, k.Name) {
					return usagef("--%s does not apply to model %s (it takes %s)", k.Name, e.Name, "--"+strings.Join(e.Knobs, " --"))
				}
				cfg.Set(k.Name, vals[i])
			}
			g, err := e.Build(cfg)
			if err != nil {
				return inputf("%v", err)
			}
			return writeOutput(cmd, "-o", out, dag.Write(g.Model()))
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to `FILE` instead of stdout")
	cmd.Flags().StringVar(&preset, "preset", "default", "configuration to start from: default (the paper's) or small")
	for i, k := range knobs {
		cmd.Flags().Int64Var(&vals[i], k.Name, 0, k.Help)
	}
	return cmd
}
