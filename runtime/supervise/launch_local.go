package supervise

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"
)

// TokenEnv carries a NATS token to workers without showing it in ps.
const TokenEnv = "GRAPHPIPE_NATS_TOKEN"

// LocalLauncher starts each generation's workers as processes of this host:
// Exe worker --quiet --nats URL --run ID --gen N --managed, and Args(i) for
// worker i (its backend and GPU).
type LocalLauncher struct {
	Exe  string // the graphpipe binary; "": this process's own
	URL  string // the NATS server's
	Env  func(n int) []string
	Args func(i int) []string // nil: none
	Log  io.Writer            // the workers' stderr

	procs  []*exec.Cmd
	exited <-chan struct{} // closed once every process of procs has been waited for
}

// Start starts one worker process per slot and watches them: one that
// exits with an error fails the generation at once (gen.Lost), instead of
// leaving the coordinator to wait for messages it will never send.
func (l *LocalLauncher) Start(ctx context.Context, gen *Generation) error {
	exe := l.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return err
		}
	}
	n := len(gen.Slots)
	var env []string
	if l.Env != nil {
		env = l.Env(n)
	}
	log := l.Log
	if _, ok := log.(*os.File); !ok && log != nil {
		// exec copies each worker's stderr into log from a goroutine of
		// its own: the workers must take turns
		log = &lockedWriter{w: log}
	}
	l.procs = nil
	for i := 0; i < n; i++ {
		args := []string{"worker", "--quiet", "--nats", l.URL, "--run", gen.Run, "--gen", strconv.FormatUint(uint64(gen.Gen), 10), "--managed"}
		if l.Args != nil {
			args = append(args, l.Args(i)...)
		}
		c := exec.CommandContext(ctx, exe, args...)
		c.Env, c.Stderr = env, log
		if err := c.Start(); err != nil {
			for _, p := range l.procs {
				p.Process.Kill()
				p.Wait()
			}
			l.procs = nil
			return fmt.Errorf("starting worker %d: %w", i, err)
		}
		l.procs = append(l.procs, c)
	}
	l.exited = watchProcesses(l.procs, gen.Lost)
	return nil
}

// Stop kills the workers of a failed generation; otherwise it waits briefly
// for them to leave, then kills what remains. It returns once every one has
// been waited for.
func (l *LocalLauncher) Stop(_ *Generation, failed bool) {
	if failed {
		for _, p := range l.procs {
			p.Process.Kill()
		}
	}
	select {
	case <-l.exited:
	case <-time.After(5 * time.Second):
		for _, p := range l.procs {
			p.Process.Kill()
		}
		<-l.exited
	}
	l.procs = nil
}

// Close has nothing to give back: every generation's processes are gone.
func (l *LocalLauncher) Close() error { return nil }

// watchProcesses owns the workers' Wait, which also joins the goroutines
// copying their stderr, and calls lost for each that exits with an error;
// the channel closes once every worker has exited and been waited for.
func watchProcesses(procs []*exec.Cmd, lost func(error)) <-chan struct{} {
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Wait()
			if st := p.ProcessState; st != nil && !st.Success() && lost != nil {
				lost(fmt.Errorf("worker process %d (pid %d) exited: %v", i, p.Process.Pid, st))
			}
		}()
	}
	exited := make(chan struct{})
	go func() {
		wg.Wait()
		close(exited)
	}()
	return exited
}

// SyncWriter is w made safe for several goroutines to write to at once.
func SyncWriter(w io.Writer) io.Writer { return &lockedWriter{w: w} }

// lockedWriter is a writer several goroutines may share.
type lockedWriter struct {
	mu sync.Mutex // guards w
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
