package main

import (
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/plan"
)

// TestRunCostsNamesJoins: explain's run costs say how much longer a
// message takes with the plan's workers on one host than with two, where
// the profile timed joins and the host has more than two; not otherwise.
func TestRunCostsNamesJoins(t *testing.T) {
	dev := plan.Profiles["cpu"]
	dev.NATSJoinS = plan.NewJoinLatencies(1e-4, 1e-4, 1.5e-4)
	for _, c := range []struct {
		devices int
		dev     plan.Device
		want    bool
	}{{3, dev, true}, {2, dev, false}, {3, plan.Profiles["cpu"], false}} {
		p := &plan.Plan{Device: c.dev, Devices: c.devices, DevicesPerNode: 4}
		for d := range c.devices {
			p.Stages = append(p.Stages, plan.PlanStage{Devices: []int{d}})
		}
		got := runCosts(p)
		has := strings.Contains(got, "the profile's joins")
		if has != c.want || has && !strings.Contains(got, "with 3 workers on a host a message between them takes 50 µs longer") {
			t.Errorf("%d workers, joins %v: %q", c.devices, c.dev.NATSJoinS.Values(), got)
		}
	}
}
