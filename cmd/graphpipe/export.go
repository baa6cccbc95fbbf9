package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/internal/atomicfile"
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
			if step, ok := intoCheckpoint(a[0], out); ok {
				return usagef("-o %s: is inside checkpoint %s of %s, which export reads: writing it would destroy that checkpoint; write outside %s", out, step, a[0], a[0])
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

// intoCheckpoint says whether writing path (through a link, to its target)
// would write into one of dir's checkpoint directories (step-N, or a
// temporary .step-N one), and which: the file it replaced would be a
// shard or the manifest of a checkpoint export reads.
func intoCheckpoint(dir, path string) (string, bool) {
	target := path
	if t, err := atomicfile.Resolve(path); err == nil {
		target = t.Path
	}
	root, err := canonicalPath(dir)
	if err != nil {
		return "", false
	}
	parent, err := canonicalPath(filepath.Dir(target))
	if err != nil {
		return "", false // a directory that is not there holds no checkpoint
	}
	rel, err := filepath.Rel(root, filepath.Join(parent, filepath.Base(target)))
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", false
	}
	first, _, _ := strings.Cut(rel, string(filepath.Separator))
	if strings.HasPrefix(first, "step-") || strings.HasPrefix(first, ".step-") {
		return first, true
	}
	return "", false
}

// canonicalPath is path absolute, its links resolved.
func canonicalPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}
