package readme

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Options say where and how Run runs a file's blocks.
type Options struct {
	Name    string        // the Markdown file's name, for messages
	Repo    string        // where readme-repo blocks run
	Dir     string        // the fresh directory every other block runs in
	Env     []string      // the commands' environment (nil: this process's)
	Timeout time.Duration // for all of it; 0: none
	Out     io.Writer     // the commands, their timings and output
	// ShowLines is how much of a command's output is shown: the first
	// ShowLines lines when it succeeds, the last 4×ShowLines when it fails.
	ShowLines int
}

// Report counts what Run ran and skipped.
type Report struct {
	Commands int     // commands that ran and succeeded
	Skipped  []Block // blocks not run
}

// FailError is a command that failed, or was running at the timeout.
type FailError struct {
	Name    string
	Line    int
	Command string
	Why     string // "exit status N", or the timeout
}

func (e *FailError) Error() string {
	return fmt.Sprintf("%s:%d: %s: %s", e.Name, e.Line, e.Why, strings.ReplaceAll(e.Command, "\n", " "))
}

// Run runs the blocks in order and stops at the first command that fails.
func Run(ctx context.Context, blocks []Block, o Options) (Report, error) {
	var rep Report
	if o.ShowLines <= 0 {
		o.ShowLines = 10
	}
	state, err := os.MkdirTemp("", "readme-state-")
	if err != nil {
		return rep, err
	}
	defer os.RemoveAll(state)
	script := filepath.Join(state, "script.sh")
	if err := os.WriteFile(script, []byte(Script(blocks, o, state)), 0o644); err != nil {
		return rep, err
	}
	for _, b := range blocks {
		if b.Skip != "" {
			rep.Skipped = append(rep.Skipped, b)
		}
	}
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", script)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = o.Dir, o.Env, o.Out, o.Out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the commands' children go with it
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()
	done, _ := os.ReadFile(filepath.Join(state, "done"))
	rep.Commands, _ = strconv.Atoi(strings.TrimSpace(string(done)))
	if runErr == nil {
		return rep, nil
	}
	at := lastStarted(blocks, state)
	fe := &FailError{Name: o.Name, Line: at.Line, Command: at.Text, Why: runErr.Error()}
	if b, err := os.ReadFile(filepath.Join(state, "status")); err == nil {
		fe.Why = "exit status " + strings.TrimSpace(string(b))
	} else if ctx.Err() != nil {
		fe.Why = fmt.Sprintf("still running after %v", o.Timeout)
		if errors.Is(ctx.Err(), context.Canceled) {
			fe.Why = "interrupted"
		}
	}
	return rep, fe
}

// lastStarted is the command the script said it started last.
func lastStarted(blocks []Block, state string) Command {
	b, _ := os.ReadFile(filepath.Join(state, "at"))
	line, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	for _, bl := range blocks {
		for _, c := range bl.Commands {
			if c.Line == line {
				return c
			}
		}
	}
	return Command{Line: line, Text: "(before the first command)"}
}

// Script is the bash script that runs the blocks; state is a directory for
// its bookkeeping: the line of the command under way (at), the commands done
// (done), the status of the one that failed (status).
func Script(blocks []Block, o Options, state string) string {
	var s strings.Builder
	fmt.Fprintf(&s, `set -o pipefail
__state=%s
__repo=%s
__dir=%s
__out="$__state/out"
__done=0
__start() { # line, command
  echo "$1" > "$__state/at"
  printf '\n%s:%%s $ %%s\n' "$1" "$2"
  __t0=$EPOCHREALTIME
}
__end() { # status
  local s=$1 n
  n=$(wc -l < "$__out")
  if [ "$s" -ne 0 ]; then
    tail -n %d "$__out"
    echo "$s" > "$__state/status"
    exit 1
  fi
  head -n %d "$__out"
  [ "$n" -gt %d ] && echo "    [... $((n - %d)) more lines]"
  __done=$((__done + 1))
  echo "$__done" > "$__state/done"
  local now=$EPOCHREALTIME
  local dt=$(( (${now//[.,]/} - ${__t0//[.,]/}) / 100000 ))
  echo "    ok ($((dt / 10)).$((dt %% 10)) s)"
}
`, quote(state), quote(o.Repo), quote(o.Dir), o.Name, 4*o.ShowLines, o.ShowLines, o.ShowLines, o.ShowLines)
	for _, b := range blocks {
		if b.Skip != "" {
			fmt.Fprintf(&s, "printf '\\n%%s\\n' %s\n", quote(fmt.Sprintf("%s:%d: skipped: %s", o.Name, b.Line, b.Skip)))
			continue
		}
		dir := "$__dir"
		if b.InRepo {
			dir = "$__repo"
		}
		fmt.Fprintf(&s, "cd \"%s\" || exit 1\n", dir)
		for _, c := range b.Commands {
			fmt.Fprintf(&s, "__start %d %s\n{ %s\n} > \"$__out\" 2>&1 < /dev/null\n__end $?\n", c.Line, quote(c.Text), c.Text)
		}
	}
	return s.String()
}

// quote is s as one single-quoted bash word.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
