package main

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/internal/atomicfile"
	"github.com/graphpipe/graphpipe/internal/regular"
	"github.com/graphpipe/graphpipe/runtime"
)

// checkOutputs refuses, before any work starts, an output flag whose file
// cannot be written: its directory missing or not a directory, not writable,
// or the path itself a directory. A run that trains for an hour must not
// find out at the end that its --trace has nowhere to go. pairs alternate
// flag and path; empty paths and "-" (stdout) pass.
func checkOutputs(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := checkOutput(pairs[i], pairs[i+1]); err != nil {
			return err
		}
	}
	return nil
}

func checkOutput(flag, path string) error {
	if path == "" || path == "-" {
		return nil
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return usagef("%s %s: is a directory, not a file", flag, path)
	}
	t, err := atomicfile.Resolve(path)
	switch {
	case errors.Is(err, regular.ErrNotRegular):
		return usagef("%s %s: cannot write: %v", flag, path, cause(err))
	case err != nil:
		t.Path = path // its directory's checks say what is wrong
	case t.Through:
		return nil // a device or a FIFO, written through: nothing is made beside it
	}
	dir := filepath.Dir(t.Path) // a link's target's directory, where its temporary file goes
	st, err := os.Stat(dir)
	switch {
	case err != nil:
		return usagef("%s %s: directory %s: %v", flag, path, dir, cause(err))
	case !st.IsDir():
		return usagef("%s %s: %s is not a directory", flag, path, dir)
	}
	if err := probeWrite(dir); err != nil {
		return usagef("%s %s: cannot write in %s: %v", flag, path, dir, err)
	}
	return nil
}

// probeWrite creates and removes a file in dir.
func probeWrite(dir string) error {
	probe, err := os.CreateTemp(dir, ".graphpipe-probe-*")
	if err != nil {
		return cause(err)
	}
	probe.Close()
	return os.Remove(probe.Name())
}

// checkCheckpointDir refuses a checkpoint directory that is not one.
func checkCheckpointDir(flag, dir string) error {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return usagef("%s %s: not a directory of checkpoints", flag, dir)
	}
	return nil
}

// loadCheckpoint reads the newest whole checkpoint of dir, named by flag:
// a directory that holds none is bad input (exit 2), as a missing one is;
// one whose checkpoints are all damaged is a fault (exit 1).
func loadCheckpoint(flag, dir string, skipped func(step int, why error)) (*runtime.Checkpoint, error) {
	if err := checkCheckpointDir(flag, dir); err != nil {
		return nil, err
	}
	c, err := runtime.LoadCheckpoint(dir, skipped)
	var ne *runtime.NoCheckpointError
	if errors.As(err, &ne) {
		return nil, usagef("%s %s: not a directory of checkpoints: it holds none", flag, dir)
	}
	return c, err
}

// checkCheckpointOut makes the --checkpoint directory, if it is not there,
// and checks that checkpoints can be written into it, before the first
// iteration rather than at the first checkpoint.
func checkCheckpointOut(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return usagef("--checkpoint %s: %v", dir, cause(err))
	}
	if err := probeWrite(dir); err != nil {
		return usagef("--checkpoint %s: cannot write in it: %v", dir, err)
	}
	return nil
}

// lockCheckpoints takes the --checkpoint directory for this run's whole
// life (runtime.LockDir); one that another run holds is exit 2, naming it.
func lockCheckpoints(dir, runID string) (*runtime.DirLock, error) {
	lock, err := runtime.LockDir(dir, runID)
	var le *runtime.LockedError
	switch {
	case errors.As(err, &le):
		return nil, inputf("--checkpoint %s: in use by %s: wait for it to end, or choose another directory", dir, cmp.Or(le.Holder, "another process"))
	case err != nil:
		return nil, inputf("--checkpoint %s: %v", dir, cause(err))
	}
	return lock, nil
}

// cause is err without the path a *fs.PathError adds (a temporary file's
// name means nothing to the user).
func cause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// writeOutput writes data to path atomically, or to stdout when path is
// empty or "-", and says so on stderr; errors name flag and path.
func writeOutput(cmd *cobra.Command, flag, path string, data []byte) error {
	if path == "" || path == "-" {
		_, err := cmd.OutOrStdout().Write(data)
		return err
	}
	if err := writeFile(flag, path, data); err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", path)
	return nil
}

// writeFile writes data to path atomically (internal/atomicfile: a device
// or a FIFO written through, never replaced), 0666 less the umask; errors
// name flag and path.
func writeFile(flag, path string, data []byte) error {
	if err := atomicfile.WriteFile(path, data, 0o666); err != nil {
		return inputf("%s %s: cannot write: %v", flag, path, cause(err))
	}
	return nil
}
