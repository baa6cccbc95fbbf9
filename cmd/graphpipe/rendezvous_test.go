package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRendezvousRelaunch: after a launch whose task 0 failed, or was
// killed while it waited for its tasks, the fixed launch on the same
// address and port trains, though its other tasks start first and find
// the file the dead task 0 left: they wait past it (saying so) for this
// launch's task 0, which removes it as it starts.
func TestRendezvousRelaunch(t *testing.T) {
	dir := t.TempDir()
	model, weights, plan := twoTower(t, dir)
	args := []string{plan, "--model", model, "--init", weights, "--steps", "2", "--join-timeout", "60s"}
	relaunch := func(t *testing.T, port int) {
		t.Helper()
		others := []*runProc{task(t, dir, torchrun(1, 3, port), args...), task(t, dir, torchrun(2, 3, port), args...)}
		for _, p := range others {
			p.waitFor(t, "waiting for this launch's task 0")
		}
		zero := task(t, dir, torchrun(0, 3, port), args...)
		for i, p := range append(others, zero) {
			if code := p.exitCode(t, 60*time.Second); code != 0 {
				t.Fatalf("task %d of the relaunch exited %d:\n%s", (i+1)%3, code, p.errs())
			}
		}
	}
	t.Run("task 0 failed", func(t *testing.T) {
		port := freePort(t)
		bad := append(append([]string{}, args...), "--init", filepath.Join(dir, "missing.safetensors"))
		first := task(t, dir, torchrun(0, 3, port), bad...)
		if code := first.exitCode(t, 30*time.Second); code != 2 {
			t.Fatalf("the failing task 0 exited %d:\n%s", code, first.errs())
		}
		relaunch(t, port)
	})
	t.Run("task 0 killed", func(t *testing.T) {
		port := freePort(t)
		first := task(t, dir, torchrun(0, 3, port), args...)
		first.waitFor(t, "coordinates run")
		first.Process.Signal(syscall.SIGKILL)
		first.Wait()
		relaunch(t, port)
	})
}

// TestRendezvousUntrustedFile: a FIFO at the rendezvous path, or a file
// others may read naming another server, is refused by every task with
// exit 2 in one line naming it, at once, not waited on past
// --join-timeout nor trusted.
func TestRendezvousUntrustedFile(t *testing.T) {
	dir := t.TempDir()
	model, _, plan := twoTower(t, dir)
	for _, tc := range []struct {
		name  string
		plant func(path, key string) error
		want  string
	}{
		{"a FIFO", func(path, _ string) error { return syscall.Mkfifo(path, 0o600) }, "not trusted: not a regular file (a FIFO)"},
		{"readable by others", func(path, key string) error {
			if err := os.WriteFile(path, []byte(`{"key":"`+key+`","url":"nats://10.6.6.6:4222","run":"r","host":"h","pid":1}`), 0o644); err != nil {
				return err
			}
			return os.Chmod(path, 0o644) // whatever the umask
		}, "not trusted: mode 0644: task 0 writes it 0600"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := freePort(t)
			key := fmt.Sprintf("torchrun-127-0-0-1-%d-0", port)
			path := filepath.Join(dir, ".graphpipe-"+key+".json")
			if err := tc.plant(path, key); err != nil {
				t.Fatal(err)
			}
			defer os.Remove(path)
			for rank := range 2 {
				p := task(t, dir, torchrun(rank, 3, port), plan, "--model", model, "--steps", "2", "--join-timeout", "20s")
				code := p.exitCode(t, 10*time.Second)
				if errs := strings.TrimSuffix(p.errs(), "\n"); code != 2 || !strings.Contains(errs, tc.want) || !strings.Contains(errs, path) || strings.Contains(errs, "\n") {
					t.Fatalf("task %d exited %d:\n%s\nwant exit 2 and one line naming %s: %q", rank, code, errs, path, tc.want)
				}
			}
		})
	}
}
