package readme

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const page = "# A page\n" + // 1
	"\n" + // 2
	"```sh readme-repo\n" + // 3
	"echo repo > from-repo   # a comment\n" + // 4
	"export GREETING=hello\n" + // 5
	"```\n" + // 6
	"Text with `inline` code.\n" + // 7
	"```sh\n" + // 8
	"# a comment line\n" + // 9
	"\n" + // 10
	"echo \"$GREETING\" \\\n" + // 11
	"  world > f\n" + // 12
	"cat f\n" + // 13
	"```\n" + // 14
	"```python\n" + // 15
	"import torch\n" + // 16
	"```\n" + // 17
	"````bash readme-skip: needs a GPU\n" + // 18
	"nvidia-smi\n" + // 19
	"```\n" + // 20  (shorter: does not close)
	"````\n" + // 21
	"```\n" + // 22
	"a plain block\n" + // 23
	"```\n" // 24

// TestParse: blocks, their languages and annotations, commands with their
// lines, continuation lines joined, comments and blank lines left out.
func TestParse(t *testing.T) {
	blocks, err := Parse([]byte(page))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range blocks {
		s := fmt.Sprintf("%d %s repo=%v skip=%q:", b.Line, b.Lang, b.InRepo, b.Skip)
		for _, c := range b.Commands {
			s += fmt.Sprintf(" [%d %s]", c.Line, c.Text)
		}
		got = append(got, s)
	}
	want := []string{
		`3 sh repo=true skip="": [4 echo repo > from-repo   # a comment] [5 export GREETING=hello]`,
		"8 sh repo=false skip=\"\": [11 echo \"$GREETING\" \\\n  world > f] [13 cat f]",
		`15 python repo=false skip="a python block, not a shell one":`,
		`18 bash repo=false skip="needs a GPU":`,
		`22  repo=false skip="a plain block, not a shell one":`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("parsed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestParseRefusals(t *testing.T) {
	for _, tc := range []struct {
		md, want string
	}{
		{"```sh readme-skip\nx\n```\n", "line 1: readme-skip needs a reason"},
		{"```sh readme-skip:  \nx\n```\n", "line 1: readme-skip needs a reason"},
		{"```sh readme-rep\nx\n```\n", `line 1: unknown annotation "readme-rep"`},
		{"```python readme-repo\nx\n```\n", "line 1: readme-repo on a block that is not run"},
		{"text\n```sh\nx\n", "line 2: the code block never closes"},
		{"```sh\ncat <<EOF\nx\nEOF\n```\n", "line 2: a here document"},
		{"```sh\necho a \\\n```\n", "line 2: the command's last line ends in a backslash"},
	} {
		_, err := Parse([]byte(tc.md))
		var pe *ParseError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.md, err, tc.want)
		}
	}
}

func runPage(t *testing.T, md string, timeout time.Duration) (repo, dir, out string, rep Report, err error) {
	t.Helper()
	blocks, perr := Parse([]byte(md))
	if perr != nil {
		t.Fatal(perr)
	}
	repo, dir = t.TempDir(), t.TempDir()
	var b bytes.Buffer
	rep, err = Run(context.Background(), blocks, Options{Name: "PAGE.md", Repo: repo, Dir: dir, Timeout: timeout, Out: &b, ShowLines: 3})
	return repo, dir, b.String(), rep, err
}

// TestRun: the blocks run in order in one shell (an export holds for the
// next block), readme-repo blocks in the repository's root, the others in the
// fresh directory; every command and every skip is shown.
func TestRun(t *testing.T) {
	repo, dir, out, rep, err := runPage(t, page, time.Minute)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(repo, "from-repo")); err != nil || string(b) != "repo\n" {
		t.Errorf("the readme-repo block did not run in the repository: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "hello world\n" {
		t.Errorf("the export did not hold, or the block ran elsewhere: %q %v", b, err)
	}
	if rep.Commands != 4 || len(rep.Skipped) != 3 {
		t.Errorf("%d commands, %d skipped; want 4 and 3", rep.Commands, len(rep.Skipped))
	}
	for _, want := range []string{"PAGE.md:13 $ cat f\nhello world\n    ok (", "PAGE.md:15: skipped: a python block, not a shell one", "PAGE.md:18: skipped: needs a GPU"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestRunStopsAtTheFirstFailure: a failing command (a failing pipe stage
// included) stops the run, named by its line, with the tail of its output;
// nothing after it runs. The head of a long output is shown, and counted.
func TestRunStopsAtTheFirstFailure(t *testing.T) {
	md := "```sh\nseq 1 10\nseq 1 20 | tail -n 2\necho before; false | cat\ntouch after\n```\n"
	_, dir, out, rep, err := runPage(t, md, time.Minute)
	var fe *FailError
	if !errors.As(err, &fe) || fe.Line != 4 || fe.Why != "exit status 1" || err.Error() != "PAGE.md:4: exit status 1: echo before; false | cat" {
		t.Fatalf("error %v, want line 4 exiting 1", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "after")); err == nil {
		t.Error("the command after the failure ran")
	}
	if rep.Commands != 2 || !strings.Contains(out, "1\n2\n3\n    [... 7 more lines]\n") || !strings.Contains(out, "PAGE.md:4 $ echo before; false | cat\nbefore\n") {
		t.Errorf("%d commands; output:\n%s", rep.Commands, out)
	}
}

// TestRunTimeout: past the timeout the run stops, naming the command that
// was running, and its children go with it.
func TestRunTimeout(t *testing.T) {
	md := "```sh\necho quick\nsleep 30 | cat\n```\n"
	start := time.Now()
	_, _, out, _, err := runPage(t, md, 500*time.Millisecond)
	var fe *FailError
	if !errors.As(err, &fe) || fe.Line != 3 || !strings.Contains(fe.Why, "still running after 500ms") {
		t.Fatalf("error %v, want line 3 still running\n%s", err, out)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v to stop", d)
	}
}
