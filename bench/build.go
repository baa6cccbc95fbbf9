package bench

import (
	"fmt"
	"os/exec"
	"path/filepath"
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
