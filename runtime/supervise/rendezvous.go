package supervise

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/graphpipe/graphpipe/internal/atomicfile"
)

// Rendezvous is what task 0 tells the other tasks of a run through a file
// under the job's shared working directory (RendezvousPath): where its
// NATS server listens, its token (none when the batch script gave every
// task one in $GRAPHPIPE_NATS_TOKEN) and the run's ID. The file is the
// user's alone (mode 0600) and goes when task 0 ends.
//
// The path is the launch's (TaskEnv.Key), but a key may outlive a launch:
// torchrun's and a Kubernetes Job's name only the address and port, so a
// launch started again after a failure has the key of the one before. A
// file whose task 0 is gone is therefore not trusted (RendezvousWait), and
// task 0 removes one when it starts (ClearRendezvous).
type Rendezvous struct {
	Key   string `json:"key"` // the launch's (TaskEnv.Key)
	URL   string `json:"url"`
	Token string `json:"token,omitempty"`
	Run   string `json:"run"`
	Host  string `json:"host"` // task 0's
	PID   int    `json:"pid"`
	// Time is when task 0 wrote it, by its clock.
	Time time.Time `json:"time"`
	// Failed, when task 0 failed before the run began, says why: the
	// tasks leave at once instead of waiting for it (the file stays, so
	// that the job's directory says why too).
	Failed string `json:"failed,omitempty"`
	// Done, when task 0 found nothing left to train (a requeued job whose
	// checkpoint is at its last step), says so: the tasks leave at once,
	// and well.
	Done string `json:"done,omitempty"`
}

// ended says task 0 wrote r as its last word (Failed, Done): it has exited.
func (r Rendezvous) ended() bool { return r.Failed != "" || r.Done != "" }

// RendezvousPath is the launch's rendezvous file in dir.
func RendezvousPath(dir string, e *TaskEnv) string {
	return filepath.Join(dir, ".graphpipe-"+e.Key+".json")
}

// WriteRendezvous writes r to path, readable by its owner alone (it holds
// the token), in one rename: a task never reads half of it. r.Time, when
// zero, is now.
func WriteRendezvous(path string, r Rendezvous) error {
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, 0o600)
}

// RendezvousError is a rendezvous file that did not come, or that cannot
// be read.
type RendezvousError struct {
	Path string
	Err  error
}

func (e *RendezvousError) Error() string { return fmt.Sprintf("rendezvous file %s: %v", e.Path, e.Err) }
func (e *RendezvousError) Unwrap() error { return e.Err }

// UntrustedError is a rendezvous file refused for what it is rather than
// what it says: not a regular file (a FIFO would hang its reader), not
// this user's, or readable by others. Task 0 writes it 0600, as the user
// the tasks run as; any other was put there by someone else, and may name
// another server.
type UntrustedError struct {
	Why string
}

func (e *UntrustedError) Error() string { return "not trusted: " + e.Why }

// RendezvousWait is how a task other than 0 waits for its task 0's
// rendezvous file.
type RendezvousWait struct {
	Path string
	Key  string // the launch's: a file of another is waited past
	// Wait bounds the wait (--join-timeout); 0 waits for ever.
	Wait time.Duration
	// Since is when this task started. A file that says its task 0 ended
	// (Failed, Done) written before then is likely an earlier launch's of
	// the same key, which this launch's task 0 removes as it starts: it is
	// waited past for Grace after Since, then taken for this launch's (its
	// task 0 ended before this task began).
	Since time.Time
	Grace time.Duration // 0: DefaultEndedGrace
	// Host is this task's ("": os.Hostname): the pid of a task 0 on it is
	// looked up.
	Host string
	// Probe says whether task 0's server at url answers (nil: a TCP
	// connection to its host and port).
	Probe func(url string) error
	// Log hears each file waited past, once; nil: nothing said.
	Log func(format string, args ...any)
}

// DefaultEndedGrace is how long a task waits past an ended launch's file
// written before it started (RendezvousWait.Grace).
const DefaultEndedGrace = 30 * time.Second

// Read waits for this launch's rendezvous file and reads it. A file of
// another key, or of a task 0 that is gone (a dead pid on this host, a
// server that does not answer), is waited past; so is, for a while, one
// that says task 0 ended before this task started. It returns an error
// when task 0 failed (Failed), a *RendezvousError wrapping an
// *UntrustedError for a file not to be trusted; a Rendezvous with Done set
// when task 0 found nothing to do.
func (w RendezvousWait) Read(ctx context.Context) (Rendezvous, error) {
	w.defaults()
	var deadline <-chan time.Time
	if w.Wait > 0 {
		t := time.NewTimer(w.Wait)
		defer t.Stop()
		deadline = t.C
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var past pastFile
	for {
		r, err := readRendezvous(w.Path)
		switch {
		case err == nil && r.Key == w.Key:
			if why := past.judge(r, w.stale); why == "" {
				return r, w.outcome(r)
			} else if past.say() {
				w.Log("rendezvous file %s: %s: waiting for this launch's task 0", w.Path, why)
			}
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return r, &RendezvousError{w.Path, err}
		}
		select {
		case <-ctx.Done():
			return r, &RendezvousError{w.Path, context.Cause(ctx)}
		case <-deadline:
			return r, w.late(past.why)
		case <-tick.C:
		}
	}
}

func (w *RendezvousWait) defaults() {
	if w.Grace <= 0 {
		w.Grace = DefaultEndedGrace
	}
	if w.Host == "" {
		w.Host, _ = os.Hostname()
	}
	if w.Probe == nil {
		w.Probe = probeServer
	}
	if w.Log == nil {
		w.Log = func(string, ...any) {}
	}
	if w.Since.IsZero() {
		w.Since = time.Now()
	}
}

// outcome is the error a file of this launch ends the wait with: task
// 0's failure, or none.
func (w *RendezvousWait) outcome(r Rendezvous) error {
	if r.Failed == "" {
		return nil
	}
	return &RendezvousError{w.Path, fmt.Errorf("task 0 (host %s, pid %d) failed: %s", r.Host, r.PID, r.Failed)}
}

// late is the error of a wait that ran out, saying what file it waited
// past, if any.
func (w *RendezvousWait) late(why string) error {
	msg := fmt.Sprintf("task 0 did not write it within %v (is task 0 running, and this directory shared between the nodes?)", w.Wait)
	if why != "" {
		msg = fmt.Sprintf("task 0 did not write it within %v; the file there is not this launch's: %s", w.Wait, why)
	}
	return &RendezvousError{w.Path, errors.New(msg)}
}

// stale says why r is not this launch's task 0's, "" when it may be: it
// says task 0 ended before this task started (for Grace), or its task 0
// is gone.
func (w *RendezvousWait) stale(r Rendezvous) string {
	if r.ended() {
		if r.Time.Before(w.Since) && time.Since(w.Since) < w.Grace {
			return fmt.Sprintf("task 0 (host %s, pid %d) ended at %s, before this task started: an earlier launch's", r.Host, r.PID, r.Time.Format(time.RFC3339))
		}
		return ""
	}
	return gone(r, w.Host, w.Probe)
}

// pastFile is the last file a wait judged, and why it was waited past:
// a task 0's server is probed once per file, not every tick.
type pastFile struct {
	r     Rendezvous
	why   string
	said  bool
	valid bool
}

// judge is why r is waited past ("" for not), stale's verdict, kept
// while the file is the same one (an ended file's is judged again: it
// turns with time).
func (p *pastFile) judge(r Rendezvous, stale func(Rendezvous) string) string {
	same := p.valid && sameFile(p.r, r)
	if same && !r.ended() {
		return p.why
	}
	if !same {
		p.said = false
	}
	p.r, p.why, p.valid = r, stale(r), true
	return p.why
}

// sameFile says a and b are one task 0's one word.
func sameFile(a, b Rendezvous) bool {
	return a.Key == b.Key && a.URL == b.URL && a.Token == b.Token && a.Run == b.Run && a.Host == b.Host && a.PID == b.PID &&
		a.Time.Equal(b.Time) && a.Failed == b.Failed && a.Done == b.Done
}

// say says whether the file waited past is to be told of: once each.
func (p *pastFile) say() bool {
	s := !p.said
	p.said = true
	return s
}

// gone says why the task 0 that wrote r, a live one's file, is gone ("" if
// it may be there): its pid is no process of this host (task 0's), or its
// server does not answer.
func gone(r Rendezvous, host string, probe func(string) error) string {
	if r.Host == host && r.PID > 0 {
		if r.PID == os.Getpid() {
			return fmt.Sprintf("its task 0 (host %s, pid %d) was an earlier process of this pid", r.Host, r.PID)
		}
		if err := syscall.Kill(r.PID, 0); errors.Is(err, syscall.ESRCH) {
			return fmt.Sprintf("its task 0 (host %s, pid %d) is gone: no such process", r.Host, r.PID)
		}
	}
	if err := probe(r.URL); err != nil {
		return fmt.Sprintf("the server of its task 0 (host %s, pid %d) does not answer: %v", r.Host, r.PID, err)
	}
	return ""
}

// probeServer connects to the host and port of a NATS URL (of any of a
// comma-separated list: a cluster's), and hangs up: nil when one answers.
func probeServer(urls string) error {
	var err error
	for _, s := range strings.Split(urls, ",") {
		u, perr := url.Parse(strings.TrimSpace(s))
		if perr != nil || u.Host == "" {
			return nil // not a URL to probe: left to the dial
		}
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "4222")
		}
		c, derr := net.DialTimeout("tcp", host, 2*time.Second)
		if derr == nil {
			return c.Close()
		}
		var oe *net.OpError
		if err = derr; errors.As(derr, &oe) && oe.Err != nil {
			err = oe.Err
		}
	}
	return err
}

// ClearRendezvous readies path for this launch's task 0 on host, before
// it plans anything: a file an earlier task 0 left there (one that ended,
// or whose task 0 is gone) is removed, so that no task reads it. A file of
// a task 0 still there (another task claiming rank 0) is an error, and so
// is one not to be trusted (*UntrustedError): task 0 would write through a
// FIFO, and another user's file is not its to remove. probe nil: a TCP
// connection to the server's host and port.
func ClearRendezvous(path, host string, probe func(string) error) error {
	if probe == nil {
		probe = probeServer
	}
	r, err := readRendezvous(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		var ue *UntrustedError
		if errors.As(err, &ue) {
			return &RendezvousError{path, err}
		}
		// not JSON, or not a rendezvous file: no task 0 is behind it
	case !r.ended() && gone(r, host, probe) == "":
		return &RendezvousError{path, fmt.Errorf("task 0 (host %s, pid %d) of this launch is running and serves at %s: another task claims rank 0", r.Host, r.PID, r.URL)}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return &RendezvousError{path, err}
	}
	return nil
}

// readRendezvous reads the rendezvous file at path, if it is one to trust:
// a regular file of this user's that no one else may read. It is opened
// without following a link and without blocking (a FIFO put there would
// hang the open until a writer came).
func readRendezvous(path string) (Rendezvous, error) {
	var r Rendezvous
	if st, err := os.Lstat(path); err != nil {
		return r, err
	} else if err := trusted(st); err != nil {
		return r, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return r, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return r, err
	}
	if err := trusted(st); err != nil { // swapped since the Lstat
		return r, err
	}
	data, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("not a rendezvous file: %v", err)
	}
	if !r.ended() && (r.URL == "" || r.Run == "") {
		return r, errors.New("not a rendezvous file: no url or run")
	}
	return r, nil
}

// trusted refuses a rendezvous file that task 0 did not write: not a
// regular file, not this user's, or open to others.
func trusted(st fs.FileInfo) error {
	m := st.Mode()
	if !m.IsRegular() {
		return &UntrustedError{Why: "not a regular file (" + fileKind(m) + "); task 0 writes a regular file"}
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return &UntrustedError{Why: fmt.Sprintf("owned by uid %d, not by this user (uid %d), as the tasks are", sys.Uid, os.Geteuid())}
	}
	if m.Perm()&0o077 != 0 {
		return &UntrustedError{Why: fmt.Sprintf("mode %#o: task 0 writes it 0600, for it holds the server's token", m.Perm())}
	}
	return nil
}

// fileKind words a mode that is not a regular file's.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "not a file"
}
