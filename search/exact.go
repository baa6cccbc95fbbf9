package search

import (
	"github.com/graphpipe/graphpipe/dag"
)

// exactPlans is spp-exact: the best sequential pipeline over every linear
// extension, by a DP over the downsets of the unit graph (see doc.go).
func exactPlans(g *dag.Graph, o *Options, cm *costModel, consider func(*Plan, string)) error {
	return &NoPlanError{"spp-exact is not implemented yet"}
}
