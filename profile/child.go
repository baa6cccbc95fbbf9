package profile

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	"github.com/graphpipe/graphpipe/runtime/wire"
)

// childEnv carries a measuring child's orders (childSpec, as JSON).
const childEnv = "GRAPHPIPE_PROFILE_CHILD"

// childCapable is set once the program has called Child: its binary can
// run as a measuring child, so measurements may start it.
var childCapable atomic.Bool

// Child makes this process a measuring child when the environment says so:
// it measures what it was told, writes its answer to stdout and exits. A
// program whose measurements should run in processes of their own, as a
// run's workers do (the cores they share, the messages between them), calls
// it first thing in main, and a test binary in TestMain; in any other
// program those measurements run as goroutines of the measuring process,
// and the result says so (RunCostsResult.InProcess).
func Child() {
	childCapable.Store(true)
	spec := os.Getenv(childEnv)
	if spec == "" {
		return
	}
	code := 0
	if err := runChild(spec, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "graphpipe profile child:", err)
		code = 1
	}
	os.Exit(code)
}

// childSpec is what a measuring child does.
type childSpec struct {
	Mode    string  `json:"mode"` // "busy", "echo", "join", "probe" or "ring"
	URL     string  `json:"url,omitempty"`
	Token   string  `json:"token,omitempty"`
	Run     string  `json:"run,omitempty"`
	ID      int32   `json:"id"`
	To      int32   `json:"to,omitempty"`      // echo: whom it answers
	Peers   int     `json:"peers,omitempty"`   // ring: the replicas; probe: the echo's ID; join: its workers
	Sizes   []int   `json:"sizes,omitempty"`   // ring: bytes all-reduced; probe: message sizes
	Reps    int     `json:"reps,omitempty"`    // ring, probe: rounds per size
	Seconds float64 `json:"seconds,omitempty"` // busy: how long, unless its go says ("go SECONDS")
	Reply   int     `json:"reply,omitempty"`   // echo: bytes of each reply (0: the message back)
	Stamp   bool    `json:"stamp,omitempty"`   // echo: stamp a reply when the message is taken and decoded
	Report  bool    `json:"report,omitempty"`  // echo: answer with a report as a worker's (probeReport), Reply ignored
	Stamper int32   `json:"stamper,omitempty"` // probe: the stamping echo's ID
}

// runChild is a child's life: set up, say "ready", wait for "go", measure,
// write the answer as one JSON line. An echo child answers until its input
// closes; a busy child measures once per "go" until its input closes.
func runChild(specJSON string, in io.Reader, out io.Writer) error {
	var spec childSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return fmt.Errorf("%s: %v", childEnv, err)
	}
	lines := bufio.NewScanner(in)
	wait := func() error {
		if !lines.Scan() {
			return errors.New("no go")
		}
		return nil
	}
	say := func(v any) error {
		b, _ := json.Marshal(v)
		_, err := fmt.Fprintf(out, "%s\n", b)
		return err
	}
	ready := func() { fmt.Fprintln(out, "ready") }
	switch spec.Mode {
	case "busy": // a round per go, until the input closes
		b, err := newBusy()
		if err != nil {
			return err
		}
		ready()
		for wait() == nil {
			seconds := spec.Seconds
			fmt.Sscanf(lines.Text(), "go %g", &seconds)
			t, err := b.run(seconds)
			if err != nil {
				return err
			}
			if err := say(t); err != nil {
				return err
			}
		}
		return nil
	}
	t, err := wire.DialNATS(wire.NATSOptions{URL: spec.URL, Token: spec.Token})
	if err != nil {
		return err
	}
	defer t.Close()
	ep, err := wire.NewEndpoint(t, spec.Run, 1, spec.ID)
	if err != nil {
		return err
	}
	defer ep.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ready()
	if untilStopped(spec.Mode) {
		go func() { wait(); wait(); cancel() }() // after go, the input closes: stop
		_, err := work(ctx, ep, spec, 0)
		return err
	}
	if err := wait(); err != nil {
		return err
	}
	answer, err := work(ctx, ep, spec, max(t.MaxPayload()-256, 64))
	if err != nil {
		return err
	}
	return say(answer)
}

// untilStopped says whether a child of mode answers every message until
// it is stopped (echo, join) rather than measuring once and answering.
func untilStopped(mode string) bool { return mode == "echo" || mode == "join" }

// proc is a measuring child as its parent sees it.
type proc struct {
	mode string
	id   int32
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
}

// startChild starts a child with spec and GOMAXPROCS procs and waits for
// it to be ready.
func startChild(spec childSpec, procs int) (*proc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(spec)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"="+string(b), fmt.Sprintf("GOMAXPROCS=%d", procs))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{mode: spec.Mode, id: spec.ID, cmd: cmd, in: in, out: bufio.NewScanner(outPipe)}
	p.out.Buffer(make([]byte, 1<<16), 1<<24)
	if line, err := p.line(); err != nil || line != "ready" {
		p.stop()
		return nil, fmt.Errorf("profile: a measuring child (%s) did not start: %q, %v", spec.Mode, line, err)
	}
	return p, nil
}

// line is the child's next line of output.
func (p *proc) line() (string, error) {
	if !p.out.Scan() {
		if err := p.out.Err(); err != nil {
			return "", err
		}
		return "", io.ErrUnexpectedEOF
	}
	return strings.TrimSpace(p.out.Text()), nil
}

// start tells the child to go.
func (p *proc) start() error {
	_, err := io.WriteString(p.in, "go\n")
	return err
}

// next reads the child's next answer into v.
func (p *proc) next(v any) error {
	line, err := p.line()
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(line), v)
}

// answer reads the child's answer into v and waits for it to end.
func (p *proc) answer(v any) error {
	line, err := p.line()
	if err == nil {
		err = json.Unmarshal([]byte(line), v)
	}
	p.in.Close()
	if werr := p.cmd.Wait(); err == nil && werr != nil {
		err = werr
	}
	return err
}

// stop ends the child: its input closed (an echo child's end), then
// killed if it has not gone within a second.
func (p *proc) stop() {
	p.in.Close()
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}
