package maketargets

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

var graphpipe string // built once by TestMain

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() { // every test here skips: no graphpipe to build
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "maketargets-")
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	graphpipe = filepath.Join(dir, "graphpipe")
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	build := exec.Command(gobin, "build", "-o", graphpipe, "github.com/graphpipe/graphpipe/cmd/graphpipe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Printf("building graphpipe: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var tracked sync.Once

// trackInputs reads the Makefile and the Go files graphpipe is built from, so
// that go test's cache, which knows the files a test opens but not what a
// test builds or runs, runs these tests again when one of them changes.
func trackInputs(t *testing.T) {
	tracked.Do(func() {
		list := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps", "-f", "{{if not .Standard}}{{.Dir}}{{end}}", "github.com/graphpipe/graphpipe/cmd/graphpipe")
		out, err := list.Output()
		if err != nil {
			t.Fatalf("go list: %v", err)
		}
		root, _ := filepath.Abs("../..")
		files := []string{filepath.Join(root, "Makefile")}
		for _, dir := range strings.Fields(string(out)) {
			if strings.HasPrefix(dir, root+string(filepath.Separator)) {
				gos, _ := filepath.Glob(filepath.Join(dir, "*.go"))
				files = append(files, gos...)
			}
		}
		for _, f := range files {
			if _, err := os.ReadFile(f); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// makeTarget runs make TARGET with the repository's Makefile in a fresh
// directory, with vars and PATH set to path; it returns make's output and
// error.
func makeTarget(t *testing.T, target, path string, vars ...string) (string, error) {
	t.Helper()
	trackInputs(t)
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make on this machine")
	}
	makefile, _ := filepath.Abs("../../Makefile")
	args := append([]string{"-f", makefile, "-C", t.TempDir(), target, "GO=true", "BIN=" + graphpipe}, vars...)
	cmd := exec.Command(mk, args...)
	cmd.Env = append(os.Environ(), "PATH="+path, "MAKEFLAGS=", "MAKELEVEL=")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// toolDir is a directory holding links to the named programs only.
func toolDir(t *testing.T, tools ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, tool := range tools {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("no %s on this machine", tool)
		}
		if err := os.Symlink(p, filepath.Join(dir, tool)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestDemoNeedsOnlyGraphpipe (issue 22, item 5): make demo runs with no
// python3 on the PATH (nothing but mkdir beside graphpipe) and sums the two
// runs up with graphpipe compare, from their median iteration times. Both
// small plans are priced with this machine's measured profile (issue 53,
// item 12: the built-in cpu profile priced another machine, and nothing
// said why prediction and measurement differed).
func TestDemoNeedsOnlyGraphpipe(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: make demo with a graphpipe of its own; make check runs it")
	}
	out, err := makeTarget(t, "demo", toolDir(t, "mkdir"))
	if err != nil {
		t.Fatalf("make demo: %v\n%s", err, out)
	}
	for _, want := range []string{"compare out/demo/run-spp.json out/demo/run-gpp.json", "MEDIAN ITERATION S", "gpp/spp: ", " measured (median iterations), ", "demo: plans, runs",
		"profile --device cpu --quick", "gpp for mmt on 4 × cpu (measured)", "spp for mmt on 4 × cpu (measured)"} {
		if !strings.Contains(out, want) {
			t.Errorf("make demo does not say %q:\n%s", want, out)
		}
	}
}

// TestReplayFailsWhenAReplayFails (issue 22, item 4): a PyTorch replay that
// fails (a traceback, a tolerance missed) fails make replay, whichever of the
// MMT's two it is, and its last lines are shown; the target used to pipe the
// replay into tail, which exited 0.
func TestReplayFailsWhenAReplayFails(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: make replay with a graphpipe of its own; make check runs it")
	}
	for _, failing := range []int{1, 2} {
		t.Run(fmt.Sprintf("replay %d", failing), func(t *testing.T) {
			dir := t.TempDir()
			torch := filepath.Join(dir, "python3")
			// a stand-in for PyTorch's python3: the failing'th call fails
			script := fmt.Sprintf(`#!/bin/sh
n=$(cat %[1]s/calls 2>/dev/null || echo 0); n=$((n + 1)); echo $n > %[1]s/calls
if [ $n -eq %[2]d ]; then
  echo "Traceback (most recent call last):"
  echo "AssertionError: largest relative difference 3e-3 past 2e-4"
  exit 1
fi
echo "largest relative difference 1e-6"
`, dir, failing)
			if err := os.WriteFile(torch, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			out, err := makeTarget(t, "replay", toolDir(t, "mkdir", "rm", "tail", "cat"), "TORCH_PY="+torch)
			if err == nil {
				t.Fatalf("make replay passed with replay %d failing:\n%s", failing, out)
			}
			if !strings.Contains(out, "AssertionError: largest relative difference 3e-3 past 2e-4") {
				t.Errorf("the failing replay's last lines are not shown:\n%s", out)
			}
			if calls, _ := os.ReadFile(filepath.Join(dir, "calls")); strings.TrimSpace(string(calls)) != fmt.Sprint(failing) {
				t.Errorf("replays after the failing one ran: %s calls", calls)
			}
		})
	}
}
