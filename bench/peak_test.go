package bench

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestChildPeak: the peak a graphpipe child reports is its own, not its
// parent's: this test process first holds 600 MB, which a child's rusage
// would count, then a graphpipe command that needs a few MB reports under
// 300 MB.
func TestChildPeak(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "graphpipe")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/graphpipe/graphpipe/cmd/graphpipe").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	ballast := make([]byte, 600<<20)
	for i := range ballast {
		ballast[i] = byte(i)
	}
	_, peak, err := childPeak(exec.Command(bin, "models", "list"))
	if err != nil {
		t.Fatal(err)
	}
	if peak <= 0 || peak > 300<<20 {
		t.Fatalf("peak %d bytes for graphpipe models list", peak)
	}
	t.Logf("graphpipe models list: peak %.1f MB (this process holds %d MB)", float64(peak)/1e6, len(ballast)>>20)
}
