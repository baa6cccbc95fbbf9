package main

import (
	"slices"
	"testing"

	"github.com/graphpipe/graphpipe/plan"
)

// TestGPUShare: how many of a run's devices share each GPU entry (rounded
// up), 1 where the GPUs suffice, an entry is the CPU, or there are none;
// and each worker's device, stage by stage, from which its GPU follows.
func TestGPUShare(t *testing.T) {
	for _, tc := range []struct {
		devices int
		entries []int
		want    int
	}{
		{3, []int{0}, 3}, {2, []int{0}, 2}, {4, []int{0, 1}, 2}, {5, []int{0, 1}, 3},
		{2, []int{0, 1}, 1}, {1, []int{0, 1, 2}, 1}, {4, []int{0, -1}, 1}, {4, nil, 1},
	} {
		if got := gpuShare(tc.devices, tc.entries); got != tc.want {
			t.Errorf("%d devices on %v: %d to a GPU, want %d", tc.devices, tc.entries, got, tc.want)
		}
	}
	p := &plan.Plan{Stages: []plan.PlanStage{{Devices: []int{2}}, {Devices: []int{0, 1}}, {Devices: []int{3}}}}
	if got := workerDevices(p); !slices.Equal(got, []int{2, 0, 1, 3}) {
		t.Errorf("workers' devices %v, want [2 0 1 3]", got)
	}
}
