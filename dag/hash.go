package dag

import (
	"crypto/sha256"
	"encoding/hex"
)

// ModelHash is the SHA-256 of the model's canonical rendering (Write): what
// a plan names its model by, so that a plan is refused for another model.
func ModelHash(g *Graph) string {
	sum := sha256.Sum256(Write(g.Model()))
	return hex.EncodeToString(sum[:])
}
