package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/dag"
)

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

// usageError is a problem with the command line itself.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// inputError is bad input (a file, a flag's value): exit 2. Lines, if set,
// are printed as they are, one problem each.
type inputError struct {
	lines []string
}

func (e *inputError) Error() string { return strings.Join(e.lines, "\n") }

func inputf(format string, args ...any) error {
	return &inputError{[]string{fmt.Sprintf(format, args...)}}
}

// exitError ends graphpipe with a status of its own (a run that diverged,
// or one stopped by a signal) after its one-line message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// run executes one command line and returns the exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	defer startCPUProfile(stderr)()
	root := newRoot(stdin)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	var ue *usageError
	var ie *inputError
	var xe *exitError
	switch {
	case errors.As(err, &xe):
		fmt.Fprintf(stderr, "graphpipe: %s\n", err)
		return xe.code
	case errors.As(err, &ie):
		for _, l := range ie.lines {
			fmt.Fprintln(stderr, l)
		}
		return 2
	case errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command"):
		fmt.Fprintf(stderr, "graphpipe: %s\nRun '%s --help' for usage.\n", err, cmd.CommandPath())
		return 2
	default:
		fmt.Fprintf(stderr, "graphpipe: %s\n", err)
		return 1
	}
}

func newRoot(stdin io.Reader) *cobra.Command {
	root := &cobra.Command{
		Use:   "graphpipe",
		Short: "Plan and train deep networks with graph pipeline parallelism",
		Long: `graphpipe cuts a multi-branch model into a DAG of pipeline stages, gives each
stage devices, a micro-batch size and a schedule, and trains it.

Models are graphpipe/model@1 JSON files; 'graphpipe models export' writes the zoo's.`,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return &usageError{err.Error()} })
	root.AddCommand(newModelsCmd(), newInspectCmd(stdin), newValidateCmd(stdin), newSearchCmd(stdin), newSimCmd(stdin), newExplainCmd(stdin), newTrainCmd(stdin), newRunCmd(stdin), newWorkerCmd(), newExportCmd(), newProfileCmd(), newImportCmd(stdin), newDataCmd(stdin), newEvalCmd(stdin))
	return root
}

// args requires exactly the named positional arguments.
func args(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, got []string) error {
		if len(got) != len(names) {
			return usagef("%s takes %d argument(s) (%s), got %d", cmd.CommandPath(), len(names), strings.Join(names, " "), len(got))
		}
		return nil
	}
}

// readInput reads a file, or stdin for "-", and the name to report it by.
func readInput(path string, stdin io.Reader) ([]byte, string, error) {
	if path == "-" {
		data, err := io.ReadAll(stdin)
		if err != nil {
			return nil, "", inputf("<stdin>: cannot read: %v", err)
		}
		return data, "<stdin>", nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", inputf("%s: cannot read: %v", path, errors.Unwrap(err))
	}
	return data, path, nil
}

// loadModel reads a model file ("-" for stdin); every problem becomes one
// line naming the file.
func loadModel(path string, stdin io.Reader) (*dag.Graph, error) {
	data, path, err := readInput(path, stdin)
	if err != nil {
		return nil, err
	}
	g, err := dag.Load(data)
	var es dag.Errors
	if errors.As(err, &es) {
		return nil, &inputError{es.Lines(path)}
	}
	return g, err
}

// computable refuses, as bad input, a model that a command must compute but
// cannot: one with an opaque op (a cost without a computation).
func computable(g *dag.Graph, path string) error {
	for i := 0; i < g.NumOps(); i++ {
		if op := g.Op(i); op.Kind == dag.Opaque {
			return inputf("%s: op %q is opaque: it has a cost but no computation, so it can be searched and simulated (and run with --emulate) but not computed", path, op.Name)
		}
	}
	return nil
}

// rebuild validates an edited model document.
func rebuild(m *dag.Model) (*dag.Graph, error) {
	g, err := dag.Build(m)
	var es dag.Errors
	if errors.As(err, &es) {
		return nil, &inputError{es.Lines("model")}
	}
	return g, err
}
