package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/internal/regular"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/profile"
)

func main() {
	profile.Child() // a measuring child of graphpipe profile, when it is one
	code := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	profile.WritePeak()
	os.Exit(code)
}

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
	in := &stdinOnce{r: stdin}
	root := newRoot(in)
	root.SetIn(in)
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
		Version:       versionText(),
	}
	cobra.AddTemplateFunc("blasLine", blasLine)
	root.SetVersionTemplate("{{.Version}}\n{{blasLine}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return &usageError{err.Error()} })
	root.PersistentPreRunE = preRuns(
		func(c *cobra.Command, _ []string) error { return positiveFlags(c, "batch", "epochs") },
		checkBLAS,
	)
	root.AddCommand(newModelsCmd(), newInspectCmd(stdin), newValidateCmd(stdin), newSearchCmd(stdin), newSimCmd(stdin), newExplainCmd(stdin), newTrainCmd(stdin), newRunCmd(stdin), newWorkerCmd(), newExportCmd(), newProfileCmd(), newImportCmd(stdin), newDataCmd(stdin), newEvalCmd(stdin), newCompareCmd(stdin), newSweepCmd(stdin), newVersionCmd())
	return root
}

// preRun is a check the root runs before every command.
type preRun = func(*cobra.Command, []string) error

// preRuns is the root's PersistentPreRunE: each check in turn, the first
// error ending it. Cobra keeps one PersistentPreRunE per command, so a
// check added by assigning it replaced the one before (the --batch 0
// check replaced the BLAS check, and a GRAPHPIPE_BLAS that did not load
// trained silently on the Go kernels): checks are added here. A
// subcommand must not set its own, which would hide these.
func preRuns(checks ...preRun) preRun {
	return func(c *cobra.Command, a []string) error {
		for _, check := range checks {
			if err := check(c, a); err != nil {
				return err
			}
		}
		return nil
	}
}

// positiveFlags refuses, in any command, each of the named flags that is
// set to 0 or less: left out, such a count means its default, and a 0
// given must not silently mean the same (nor a negative one be blamed on
// another flag it feeds).
func positiveFlags(cmd *cobra.Command, names ...string) error {
	for _, name := range names {
		fl := cmd.Flags().Lookup(name)
		if fl == nil || !fl.Changed {
			continue
		}
		if n, err := strconv.ParseInt(fl.Value.String(), 10, 64); err == nil && n < 1 {
			return usagef("--%s: must be positive, got %d", name, n)
		}
	}
	return nil
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

// stdinOnce is standard input, which one file argument may read: a second
// "-" is refused instead of reading nothing.
type stdinOnce struct {
	r    io.Reader
	read bool
}

func (s *stdinOnce) Read(p []byte) (int, error) { s.read = true; return s.r.Read(p) }

// readInput reads a file, or stdin for "-", and the name to report it by.
func readInput(path string, stdin io.Reader) ([]byte, string, error) {
	if path == "-" {
		if s, ok := stdin.(*stdinOnce); ok && s.read {
			return nil, "", usagef("-: standard input was read already, for another argument: only one file can come from it")
		}
		data, err := io.ReadAll(stdin)
		if err != nil {
			return nil, "", inputf("<stdin>: cannot read: %v", err)
		}
		return data, "<stdin>", nil
	}
	data, err := regular.ReadFile(path) // a FIFO, a device or a directory is refused before it is read
	if err != nil {
		return nil, "", inputf("%s: cannot read: %v", path, errors.Unwrap(err))
	}
	return data, path, nil
}

// flagInputError names the flag in readInput's error about the file it
// names.
func flagInputError(flag string, err error) error {
	var ie *inputError
	if !errors.As(err, &ie) {
		return err
	}
	lines := make([]string, len(ie.lines))
	for i, l := range ie.lines {
		lines[i] = flag + " " + l
	}
	return &inputError{lines}
}

// loadModel reads a model file ("-" for stdin); every problem becomes one
// line naming the file.
func loadModel(path string, stdin io.Reader) (*dag.Graph, error) {
	data, path, err := readInput(path, stdin)
	if err != nil {
		return nil, err
	}
	return parseModel(data, path)
}

// parseModel loads a model file's bytes, read from path; every problem
// becomes one line naming it, and a plan file is named as one.
func parseModel(data []byte, path string) (*dag.Graph, error) {
	g, err := dag.Load(data)
	var es dag.Errors
	if errors.As(err, &es) {
		if isPlan(data) {
			return nil, inputf("%s: is a plan (%s), not a model: 'graphpipe explain %s' describes it, 'graphpipe sim %s' simulates it, 'graphpipe run %s --model MODEL' trains it", path, plan.PlanFormat, path, path, path)
		}
		return nil, &inputError{es.Lines(path)}
	}
	return g, err
}

// isPlan says whether data is a plan file by its format tag.
func isPlan(data []byte) bool {
	var probe struct {
		Format string `json:"format"`
	}
	json.Unmarshal(data, &probe)
	return probe.Format == plan.PlanFormat
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
