package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/graphpipe/graphpipe/internal/regular"
)

// lockFile is the file in a checkpoint directory that its owner holds an
// exclusive flock on, and in which it writes who it is.
const lockFile = ".lock"

// LockedError is a checkpoint directory that another run holds.
type LockedError struct {
	Dir    string
	Holder string // "run R on host H, pid P", or "" when it has not said yet
}

func (e *LockedError) Error() string {
	holder := e.Holder
	if holder == "" {
		holder = "another process"
	}
	return fmt.Sprintf("%s is in use by %s", e.Dir, holder)
}

// DirLock is an exclusive hold on a checkpoint directory.
type DirLock struct{ f *os.File }

// LockDir takes dir (making it if need be) for one run: an exclusive,
// non-blocking flock on dir/.lock, held until Unlock or until the process
// ends, so a run that crashes leaves no stale lock. The lock file then says
// who holds it: run ID, host and pid. A directory another process holds is
// a *LockedError naming that process.
func LockDir(dir, run string) (*DirLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, lockFile)
	if st, err := os.Lstat(path); err == nil && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("its lock file %s: %v: remove it", path, regular.Mode(st.Mode()))
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("its lock file %s: %v", path, errors.Unwrap(err))
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			b, _ := os.ReadFile(filepath.Join(dir, lockFile))
			return nil, &LockedError{Dir: dir, Holder: strings.TrimSpace(string(b))}
		}
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	host, _ := os.Hostname()
	f.Truncate(0)
	f.WriteAt([]byte(fmt.Sprintf("run %s on host %s, pid %d\n", run, host, os.Getpid())), 0)
	return &DirLock{f}, nil
}

// Unlock gives the directory up.
func (l *DirLock) Unlock() {
	if l != nil && l.f != nil {
		l.f.Close() // closing the last descriptor releases the flock
		l.f = nil
	}
}
