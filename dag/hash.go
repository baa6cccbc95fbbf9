package dag

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"
)

// ModelHash is the SHA-256 of the model's canonical rendering (Write): what
// a plan names its model by, so that a plan is refused for another model.
// A graph renders it once: a Graph does not change once built, and a run
// asks for its hash again and again (each check of a plan against it, each
// checkpoint's manifest).
func ModelHash(g *Graph) string {
	g.hash.once.Do(func() {
		sum := sha256.Sum256(Write(g.Model()))
		g.hash.sum = hex.EncodeToString(sum[:])
	})
	return g.hash.sum
}

// modelHash is a graph's ModelHash, made by the first call.
type modelHash struct {
	once sync.Once
	sum  string
}
