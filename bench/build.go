package bench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// buildGraphpipe builds the graphpipe command into dir and returns its
// path: the benchmarks run it as a user would, a process of its own.
func buildGraphpipe(dir string) (string, error) {
	bin := filepath.Join(dir, "graphpipe")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/graphpipe/graphpipe/cmd/graphpipe").CombinedOutput(); err != nil {
		return "", fmt.Errorf("building graphpipe: %v: %s", err, out)
	}
	return bin, nil
}

// graphpipeWorkdir makes a temporary directory named after prefix and
// builds graphpipe into it: the directory (the caller removes it) and the
// binary's path.
func graphpipeWorkdir(prefix string) (dir, bin string, err error) {
	if dir, err = os.MkdirTemp("", prefix); err != nil {
		return "", "", err
	}
	if bin, err = buildGraphpipe(dir); err != nil {
		os.RemoveAll(dir)
		return "", "", err
	}
	return dir, bin, nil
}

// graphpipeOut runs the graphpipe at bin with args, as a process of its
// own, and returns what it printed on stdout; a failure names the command
// and ends with the last line it printed on stderr.
func graphpipeOut(bin string, args ...string) ([]byte, error) {
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if last := strings.TrimSpace(lastLine(string(ee.Stderr))); last != "" {
				err = fmt.Errorf("%v: %s", err, last)
			}
		}
		return nil, fmt.Errorf("graphpipe %s: %v", strings.Join(args, " "), err)
	}
	return out, nil
}
