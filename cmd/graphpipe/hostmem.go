package main

import (
	"github.com/graphpipe/graphpipe/profile"
)

// hostMemory is this machine's memory, or 0 when unknown (tests replace it).
var hostMemory = profile.HostMemory

// checkHost refuses, as a usage error naming flag, what needs more than
// hostShare of this host's memory; an unknown host size passes.
func checkHost(flag, what string, need float64) error {
	have := hostMemory()
	if profile.Fits(need, have) {
		return nil
	}
	return usagef("%s: %s needs about %.3g GB, over %.0f%% of the %.3g GB of this host", flag, what, need/1e9, 100*profile.HostShare, float64(have)/1e9)
}
