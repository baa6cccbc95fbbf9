package supervise

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// deadPID is the pid of a process that has exited (and been reaped).
func deadPID(t *testing.T) int {
	t.Helper()
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	return c.Process.Pid
}

// answers is a probe of servers that answer; silent, of 10.0.0.9's, which
// does not.
func answers(string) error { return nil }
func silent(url string) error {
	if strings.Contains(url, "10.0.0.9") {
		return syscall.ECONNREFUSED
	}
	return nil
}

// TestRendezvousWaitsPastStale: a task waits past a rendezvous file of its
// key that an earlier launch's task 0 left (its pid gone, its server
// silent, or its failure older than the task), and reads this launch's
// when it comes; a failure or a "done" of this launch is read at once, and
// an earlier failure still there after the grace is taken for this
// launch's.
func TestRendezvousWaitsPastStale(t *testing.T) {
	host, _ := os.Hostname()
	start := time.Now()
	before, after := start.Add(-time.Minute), start.Add(time.Second)
	good := Rendezvous{Key: "k", URL: "nats://127.0.0.1:4222", Run: "r", Host: host, PID: os.Getppid(), Time: after} // a live pid
	for _, tc := range []struct {
		name  string
		stale Rendezvous
		probe func(string) error
		grace time.Duration
		want  string // "": waited past until good came; else the error's or Done's words
	}{
		{"a dead task 0 on this host", Rendezvous{Key: "k", URL: "nats://127.0.0.1:1", Run: "old", Host: host, PID: deadPID(t), Time: before}, answers, 0, ""},
		{"a task 0 whose server does not answer", Rendezvous{Key: "k", URL: "nats://10.0.0.9:4222", Run: "old", Host: "elsewhere", PID: 1, Time: before}, silent, 0, ""},
		{"a failure before this task started", Rendezvous{Key: "k", Host: "elsewhere", PID: 1, Failed: "no such model", Time: before}, answers, 0, ""},
		{"a done before this task started", Rendezvous{Key: "k", Host: "elsewhere", PID: 1, Done: "nothing left to do", Time: before}, answers, 0, ""},
		{"another launch's", Rendezvous{Key: "other", URL: "nats://10.0.0.9:4222", Run: "x", Host: "elsewhere", PID: 1}, answers, 0, ""},
		{"a failure of this launch", Rendezvous{Key: "k", Host: "elsewhere", PID: 7, Failed: "no such model", Time: after}, answers, 0, "task 0 (host elsewhere, pid 7) failed: no such model"},
		{"a failure still there after the grace", Rendezvous{Key: "k", Host: "elsewhere", PID: 7, Failed: "no such model", Time: before}, answers, time.Nanosecond, "task 0 (host elsewhere, pid 7) failed: no such model"},
		{"a done of this launch", Rendezvous{Key: "k", Host: "elsewhere", PID: 7, Done: "nothing left to do", Time: after}, answers, 0, "nothing left to do"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), ".graphpipe-k.json")
			if err := WriteRendezvous(path, tc.stale); err != nil {
				t.Fatal(err)
			}
			var said []string
			w := RendezvousWait{Path: path, Key: "k", Wait: 10 * time.Second, Since: start, Grace: tc.grace, Host: host, Probe: tc.probe,
				Log: func(format string, args ...any) { said = append(said, format) }}
			if tc.want == "" {
				time.AfterFunc(300*time.Millisecond, func() { WriteRendezvous(path, good) })
			}
			r, err := w.Read(context.Background())
			got := r.Done
			if err != nil {
				got = err.Error()
			}
			switch {
			case tc.want == "" && (err != nil || r.Run != "r"):
				t.Fatalf("got %+v, %v; want this launch's file", r, err)
			case tc.want == "" && tc.stale.Key == "k" && len(said) != 1:
				t.Fatalf("said %q, want one word of the file waited past", said)
			case tc.want != "" && !strings.HasSuffix(got, tc.want):
				t.Fatalf("got %+v, %v; want %q", r, err, tc.want)
			}
		})
	}
}

// TestRendezvousWaitTimesOutNamingStale: a wait that runs out past a
// stale file says why it was not taken.
func TestRendezvousWaitTimesOutNamingStale(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".graphpipe-k.json")
	host, _ := os.Hostname()
	pid := deadPID(t)
	if err := WriteRendezvous(path, Rendezvous{Key: "k", URL: "nats://127.0.0.1:1", Run: "old", Host: host, PID: pid}); err != nil {
		t.Fatal(err)
	}
	w := RendezvousWait{Path: path, Key: "k", Wait: 200 * time.Millisecond, Host: host, Probe: answers}
	_, err := w.Read(context.Background())
	if err == nil || !strings.Contains(err.Error(), "the file there is not this launch's: its task 0 (host "+host+", pid ") || !strings.Contains(err.Error(), "is gone: no such process") {
		t.Fatalf("got %v", err)
	}
}

// untrusted plants at path each kind of file task 0 never writes.
var untrusted = []struct {
	name  string
	plant func(t *testing.T, path string)
	want  string
}{
	{"a FIFO", func(t *testing.T, path string) {
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			t.Fatal(err)
		}
	}, "not trusted: not a regular file (a FIFO)"},
	{"readable by others", func(t *testing.T, path string) {
		plantRendezvous(t, path)
		os.Chmod(path, 0o644)
	}, "not trusted: mode 0644: task 0 writes it 0600"},
	{"a symbolic link", func(t *testing.T, path string) {
		other := path + ".real"
		plantRendezvous(t, other)
		if err := os.Symlink(other, path); err != nil {
			t.Fatal(err)
		}
	}, "not trusted: not a regular file (a symbolic link)"},
	{"another user's", func(t *testing.T, path string) {
		if os.Geteuid() != 0 {
			t.Skip("only root can give a file away")
		}
		plantRendezvous(t, path)
		if err := os.Chown(path, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}, "not trusted: owned by uid 65534, not by this user (uid 0)"},
}

func plantRendezvous(t *testing.T, path string) {
	t.Helper()
	if err := WriteRendezvous(path, Rendezvous{Key: "k", URL: "nats://10.6.6.6:4222", Run: "r", Host: "h", PID: 1}); err != nil {
		t.Fatal(err)
	}
}

// TestRendezvousUntrusted: a FIFO, a link, a file others may read or
// another user's, at the rendezvous path, is refused at once with an
// *UntrustedError, neither hung on nor trusted; task 0 refuses it too and
// leaves it there.
func TestRendezvousUntrusted(t *testing.T) {
	for _, tc := range untrusted {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), ".graphpipe-k.json")
			tc.plant(t, path)
			done := make(chan error, 1)
			go func() {
				_, err := RendezvousWait{Path: path, Key: "k", Wait: 5 * time.Second, Probe: answers}.Read(context.Background())
				done <- err
			}()
			var ue *UntrustedError
			select {
			case err := <-done:
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("task: got %v, want %q", err, tc.want)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("the task still waits on it")
			}
			if err := ClearRendezvous(path, "h", answers); !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("task 0: got %v, want %q", err, tc.want)
			}
			if _, err := os.Lstat(path); err != nil {
				t.Fatalf("task 0 removed it: %v", err)
			}
		})
	}
}

// TestClearRendezvous: task 0 removes the file an earlier launch's task 0
// left (failed, or gone) and refuses to start beside a task 0 that is
// still there.
func TestClearRendezvous(t *testing.T) {
	host, _ := os.Hostname()
	for _, tc := range []struct {
		name  string
		r     *Rendezvous // nil: none; Key "": not JSON
		probe func(string) error
		kept  bool
	}{
		{"none", nil, answers, false},
		{"a failed one", &Rendezvous{Key: "k", Host: host, PID: os.Getppid(), Failed: "no model"}, answers, false},
		{"a dead task 0's", &Rendezvous{Key: "k", URL: "nats://127.0.0.1:1", Run: "r", Host: host, PID: deadPID(t)}, answers, false},
		{"a silent server's", &Rendezvous{Key: "k", URL: "nats://10.0.0.9:4222", Run: "r", Host: "elsewhere", PID: 1}, silent, false},
		{"not a rendezvous file", &Rendezvous{}, answers, false},
		{"a live task 0's", &Rendezvous{Key: "k", URL: "nats://127.0.0.1:1", Run: "r", Host: host, PID: os.Getppid()}, answers, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), ".graphpipe-k.json")
			switch {
			case tc.r == nil:
			case tc.r.Key == "":
				if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
					t.Fatal(err)
				}
			default:
				if err := WriteRendezvous(path, *tc.r); err != nil {
					t.Fatal(err)
				}
			}
			err := ClearRendezvous(path, host, tc.probe)
			_, serr := os.Lstat(path)
			switch {
			case tc.kept && (err == nil || !strings.Contains(err.Error(), "another task claims rank 0") || serr != nil):
				t.Fatalf("got %v, the file: %v; want it kept and refused", err, serr)
			case !tc.kept && (err != nil || serr == nil):
				t.Fatalf("got %v; the file is still there", err)
			}
		})
	}
}

// TestProbeServer: a server that listens answers, one of a cluster's
// list is enough, and a port no one holds does not.
func TestProbeServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	live := "nats://" + l.Addr().String()
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	gone := "nats://" + dead.Addr().String()
	dead.Close()
	defer l.Close()
	for _, tc := range []struct {
		urls    string
		answers bool
	}{{live, true}, {gone + "," + live, true}, {gone, false}, {"not a url", true}} {
		if err := probeServer(tc.urls); (err == nil) != tc.answers {
			t.Errorf("%s: %v, want answering %v", tc.urls, err, tc.answers)
		}
	}
}
