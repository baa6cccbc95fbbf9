package supervise

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/graphpipe/graphpipe/internal/atomicfile"
)

// Rendezvous is what task 0 tells the other tasks of a run through a file
// under the job's shared working directory (RendezvousPath): where its
// NATS server listens, its token (none when the batch script gave every
// task one in $GRAPHPIPE_NATS_TOKEN) and the run's ID. The file is the
// user's alone (mode 0600) and goes when task 0 ends.
type Rendezvous struct {
	Key   string `json:"key"` // the launch's (TaskEnv.Key)
	URL   string `json:"url"`
	Token string `json:"token,omitempty"`
	Run   string `json:"run"`
	Host  string `json:"host"` // task 0's
	PID   int    `json:"pid"`
	// Failed, when task 0 failed before the run began, says why: the
	// tasks leave at once instead of waiting for it (the file stays, so
	// that the job's directory says why too).
	Failed string `json:"failed,omitempty"`
}

// RendezvousPath is the launch's rendezvous file in dir.
func RendezvousPath(dir string, e *TaskEnv) string {
	return filepath.Join(dir, ".graphpipe-"+e.Key+".json")
}

// WriteRendezvous writes r to path, readable by its owner alone (it holds
// the token), in one rename: a task never reads half of it.
func WriteRendezvous(path string, r Rendezvous) error {
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

// ReadRendezvous waits up to wait (0: for ever) for task 0's rendezvous
// file at path and reads it; one of another launch (its Key not key) is
// waited past.
func ReadRendezvous(ctx context.Context, path, key string, wait time.Duration) (Rendezvous, error) {
	var deadline <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		deadline = t.C
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		r, err := readRendezvous(path)
		switch {
		case err == nil && r.Key == key && r.Failed != "":
			return r, &RendezvousError{path, fmt.Errorf("task 0 (host %s, pid %d) failed: %s", r.Host, r.PID, r.Failed)}
		case err == nil && r.Key == key:
			return r, nil
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return r, &RendezvousError{path, err}
		}
		select {
		case <-ctx.Done():
			return r, &RendezvousError{path, context.Cause(ctx)}
		case <-deadline:
			return r, &RendezvousError{path, fmt.Errorf("task 0 did not write it within %v (is task 0 running, and this directory shared between the nodes?)", wait)}
		case <-tick.C:
		}
	}
}

func readRendezvous(path string) (Rendezvous, error) {
	var r Rendezvous
	data, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("not a rendezvous file: %v", err)
	}
	if r.Failed == "" && (r.URL == "" || r.Run == "") {
		return r, errors.New("not a rendezvous file: no url or run")
	}
	return r, nil
}
