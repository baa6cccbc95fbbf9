package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

func newValidateCmd(stdin io.Reader) *cobra.Command {
	return &cobra.Command{
		Use:   "validate MODEL",
		Short: "Check a model file against graphpipe/model@1",
		Long: `Check a model file against the graphpipe/model@1 contract. A valid file prints
one line and exits 0; an invalid one prints one line per problem, naming the op
or field, and exits 2. MODEL may be - for standard input.`,
		Args: args("MODEL"),
		RunE: func(cmd *cobra.Command, a []string) error {
			g, err := loadModel(a[0], stdin)
			if err != nil {
				return err
			}
			t := g.Total()
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok: %d ops, %d inputs, %d parameters\n", a[0], g.NumOps(), len(g.Inputs()), t.Params)
			return nil
		},
	}
}
