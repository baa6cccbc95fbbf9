package dag

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// TestModelHashOnce: a graph's hash is its canonical rendering's SHA-256,
// rendered once: every later call (a run's checks, each checkpoint's
// manifest) allocates nothing, where rendering the model again would
// allocate its whole file.
func TestModelHashOnce(t *testing.T) {
	for _, path := range []string{"testdata/valid/all-ops.json", "testdata/valid/two-branch-demo.json"} {
		g := load(t, path)
		sum := sha256.Sum256(Write(g.Model()))
		if got, want := ModelHash(g), hex.EncodeToString(sum[:]); got != want {
			t.Fatalf("%s: hash %s, want the rendering's %s", path, got, want)
		}
		if n := testing.AllocsPerRun(20, func() { ModelHash(g) }); n != 0 {
			t.Errorf("%s: ModelHash allocates %v times a call after the first: it renders the model again", path, n)
		}
		if h := ModelHash(load(t, path)); h != ModelHash(g) {
			t.Errorf("%s: a second load of the model hashes to %s, the first to %s", path, h, ModelHash(g))
		}
	}
}
