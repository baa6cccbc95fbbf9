package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/tensor"
)

func newExportCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "export DIR -o FILE",
		Short: "Write the newest whole checkpoint's parameters as one safetensors file",
		Long: `Write the parameters of the newest whole checkpoint in DIR as one safetensors
file a PyTorch user can load: each parameter as "<op>.<param>" in PyTorch's layout.`,
		Args: args("DIR"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if out == "" {
				return usagef("export needs -o FILE")
			}
			if err := checkOutputs("-o", out); err != nil {
				return err
			}
			c, err := loadCheckpoint("DIR", a[0], func(step int, why error) {
				fmt.Fprintf(cmd.ErrOrStderr(), "graphpipe: checkpoint at step %d is not whole (%v): using the one before\n", step, why)
			})
			if err != nil {
				return err
			}
			var entries []tensor.Named
			for name, v := range c.Params {
				entries = append(entries, tensor.Named{Name: name, Shape: v.Shape, F32: v.Data})
			}
			b, err := tensor.EncodeSafetensors(entries, map[string]string{"step": fmt.Sprint(c.Manifest.Step), "model": c.Manifest.Model})
			if err != nil {
				return err
			}
			return writeOutput(cmd, "-o", out, b)
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the safetensors `FILE` to write")
	return cmd
}
