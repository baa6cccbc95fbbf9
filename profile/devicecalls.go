package profile

import (
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// Pricing what a step asks of a GPU's driver (cuda.Counts, counted by the
// device itself, so the emulator's counts price a GPU's step): the plan's
// compute prediction prices the kernels' work; this prices what surrounds
// it. The model, and its assumptions (docs/planner.md):
//
//   - Copies between host and device take bytes over the host link:
//     pinned ones at HostBW, pageable ones at PageableBW (the driver
//     stages them through its own buffers and the call waits). Device
//     copies move their bytes twice (read and write) and memsets once, at
//     the device's memory bandwidth. All of them run in the device's one
//     queue, in line with the compute: their time adds to the device's.
//   - Launches, cuBLAS and cuDNN calls, copies, memsets and events are queued by the
//     host, Launch seconds each (the profile's per-call overhead), while
//     the device works: an iteration takes the longer of the device's time
//     and the host's.
//   - Each host wait (a sync) costs SyncS on top of the work it waits for,
//     and empties the queue; each allocation of device memory allocS and of
//     pinned host memory hostAllocS (a caching pool makes both rare after
//     the first step).
const (
	allocS     = 100e-6 // cuMemAlloc: assumed
	hostAllocS = 1e-3   // cuMemHostAlloc of a staging buffer: assumed
)

// CallsPrice is a step's driver calls priced on a device, by where the time
// goes (seconds).
type CallsPrice struct {
	CopyS  float64 `json:"copy_s"`  // host-device copies, device copies and memsets, in the device's queue
	IssueS float64 `json:"issue_s"` // the host's time to queue every call
	WaitS  float64 `json:"wait_s"`  // the host's waits for the device
	AllocS float64 `json:"alloc_s"` // device and pinned allocations
}

// PriceCalls prices c on d (see above).
func PriceCalls(d plan.Device, c cuda.Counts) CallsPrice {
	hostBW, pageableBW, syncS := d.HostLink()
	var p CallsPrice
	p.CopyS = float64(c.PinnedBytes)/hostBW + float64(c.PageableBytes)/pageableBW
	if d.MemBW > 0 {
		p.CopyS += float64(2*c.D2DBytes+c.MemsetBytes) / d.MemBW
	}
	calls := c.Launches + c.GEMMs + c.DNN + c.Memsets + c.H2DCalls + c.D2HCalls + c.D2DCalls + c.Events
	p.IssueS = float64(calls) * d.Launch
	p.WaitS = float64(c.Syncs) * syncS
	p.AllocS = float64(c.Allocs)*allocS + float64(c.HostAllocs)*hostAllocS
	return p
}

// EstimateIteration is an iteration's time on d from the plan's compute
// prediction (predicted, seconds) and the driver calls c of one of its
// steps: the longer of the device's time (the compute and the copies in
// its queue) and the host's time to queue the calls, then the waits and
// the allocations.
func EstimateIteration(d plan.Device, predicted float64, c cuda.Counts) float64 {
	p := PriceCalls(d, c)
	return max(predicted+p.CopyS, p.IssueS) + p.WaitS + p.AllocS
}
