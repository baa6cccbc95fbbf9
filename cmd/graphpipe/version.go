package main

import (
	"fmt"
	goruntime "runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/tensor"
)

// Set at link time by make build (-ldflags -X), where the toolchain's own
// stamp may be off (GOFLAGS=-buildvcs=false): the commit, "true" when the
// tree had uncommitted changes, and a release's version.
var (
	commit   string
	modified string
	version  string
)

// buildVersion is this binary's version and commit: what make build linked
// in, else what the Go toolchain stamped (go build in a git checkout, go
// install of a module version).
func buildVersion() (ver, rev string, dirty bool) {
	ver, rev, dirty = version, commit, modified == "true"
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	if ver == "" {
		ver = info.Main.Version
	}
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision" && rev == "":
			rev = s.Value
		case s.Key == "vcs.modified" && modified == "":
			dirty = s.Value == "true"
		}
	}
	return
}

// versionText is what graphpipe version and --version print.
func versionText() string {
	ver, rev, dirty := buildVersion()
	return formatVersion(ver, rev, dirty)
}

func formatVersion(ver, rev string, dirty bool) string {
	if ver == "" || ver == "(devel)" {
		ver = "devel"
	}
	if rev == "" {
		rev = "unknown"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += " with uncommitted changes"
	}
	return fmt.Sprintf("graphpipe %s (commit %s; %s %s/%s)", ver, rev, goruntime.Version(), goruntime.GOOS, goruntime.GOARCH)
}

// blasLine is version's second line: what computes the CPU's matrix
// products (GRAPHPIPE_BLAS, the system BLAS found, or the Go kernels).
func blasLine() string {
	info, err := tensor.LoadBLAS()
	if err != nil {
		return fmt.Sprintf("blas: %s=%s did not load: %v", tensor.BLASEnv, tensor.BLASChoice(), err)
	}
	return "blas: " + info.String()
}

// computes are the commands that compute on the CPU: a library that
// GRAPHPIPE_BLAS names and that does not load stops them before they start.
var computes = map[string]bool{"train": true, "run": true, "worker": true, "profile": true, "eval": true, "agent": true}

func checkBLAS(cmd *cobra.Command, _ []string) error {
	if !computes[cmd.Name()] {
		return nil
	}
	if _, err := tensor.LoadBLAS(); err != nil {
		fix := "unset it to use the system BLAS found, or set it to go for the Go kernels"
		if tensor.BLASChoice() == "auto" { // the system's own library is at fault
			fix = "set " + tensor.BLASEnv + "=go for the Go kernels, or another library's path"
		}
		return inputf("%s=%s: %v (%s)", tensor.BLASEnv, tensor.BLASChoice(), err, fix)
	}
	return nil
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print graphpipe's version and the commit it was built from",
		Args:  args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s\n%s\n", versionText(), blasLine())
			return err
		},
	}
}
