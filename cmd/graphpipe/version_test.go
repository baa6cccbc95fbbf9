package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersion (issue 22, item 6): graphpipe version and --version print the
// same line, naming graphpipe, its version and its commit.
func TestVersion(t *testing.T) {
	code, out, errs := gp(t, "", "version")
	if code != 0 || !strings.HasPrefix(out, "graphpipe ") || !strings.Contains(out, "(commit ") {
		t.Fatalf("version: exit %d %q %q", code, out, errs)
	}
	code, flag, errs := gp(t, "", "--version")
	if code != 0 || flag != out {
		t.Fatalf("--version: exit %d %q %q, want %q", code, flag, errs, out)
	}
	for _, tc := range []struct {
		ver, rev string
		dirty    bool
		want     string
	}{
		{"(devel)", "0123456789abcdef0123", false, "graphpipe devel (commit 0123456789ab; "},
		{"v1.2.3", "", false, "graphpipe v1.2.3 (commit unknown; "},
		{"", "abc", true, "graphpipe devel (commit abc with uncommitted changes; "},
	} {
		if got := formatVersion(tc.ver, tc.rev, tc.dirty); !strings.HasPrefix(got, tc.want) {
			t.Errorf("formatVersion(%q, %q, %v) = %q, want %q...", tc.ver, tc.rev, tc.dirty, got, tc.want)
		}
	}
}

// TestVersionOfMakeBuild: the binary make build writes names the commit
// checked out (make and git permitting).
func TestVersionOfMakeBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: make build, a build of its own; make check runs it")
	}
	if testing.Short() {
		t.Skip("builds graphpipe")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	if _, err := os.ReadFile("../../Makefile"); err != nil { // go test's cache then knows this test reads it
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "graphpipe")
	mk := exec.Command("make", "-C", "../..", "build", "BIN="+bin)
	mk.Env = append(os.Environ(), "MAKEFLAGS=", "MAKELEVEL=") // not make test's
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "(commit " + strings.TrimSpace(string(head))[:12]; !strings.Contains(string(out), want) {
		t.Errorf("version %q does not say %q", out, want)
	}
	os.Remove(bin)
}
