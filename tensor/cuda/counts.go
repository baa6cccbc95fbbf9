package cuda

// Counts is what a Device has asked of the driver (or of the emulator, which
// counts the same calls: the counting is done above the backend), from Open
// to now. Each field counts calls, or bytes where its name says so; a copy
// is counted when it is queued, a wait when it is asked for. Take a Counts
// before and after a piece of work and Sub them to price it: an iteration's
// synchronisations, bytes copied, launches, cuBLAS and cuDNN calls and
// allocations.
// Counting is a few integer additions per call: a Device is used by one
// goroutine at a time, so the counters need no atomics (read them from the
// goroutine that uses the device, or under Exclusive).
type Counts struct {
	// Syncs counts the host's waits for the device: for everything queued
	// (cuStreamSynchronize: Sync, and the pageable copies, which wait) or
	// for the work before an event (cuEventSynchronize: Wait).
	Syncs  int64 `json:"syncs"`
	Events int64 `json:"events"` // events recorded in the queue (cuEventRecord)

	H2DCalls int64 `json:"h2d_calls"` // host-to-device copies (cuMemcpyHtoDAsync)
	H2DBytes int64 `json:"h2d_bytes"`
	D2HCalls int64 `json:"d2h_calls"` // device-to-host copies (cuMemcpyDtoHAsync)
	D2HBytes int64 `json:"d2h_bytes"`
	// Host copies of either direction by the host memory they use: pageable
	// Go memory (Upload, Download: the driver stages it and the call waits)
	// or pinned staging buffers (UploadStaged, DownloadStaged).
	PageableCopies int64 `json:"pageable_copies"`
	PageableBytes  int64 `json:"pageable_bytes"`
	PinnedCopies   int64 `json:"pinned_copies"`
	PinnedBytes    int64 `json:"pinned_bytes"`
	D2DCalls       int64 `json:"d2d_calls"` // device-to-device copies (cuMemcpyDtoDAsync)
	D2DBytes       int64 `json:"d2d_bytes"`

	Launches    int64 `json:"launches"` // kernels.cu kernels (cuLaunchKernel)
	GEMMs       int64 `json:"gemms"`    // cuBLAS calls; a strided batch is one
	DNN         int64 `json:"dnn"`      // cuDNN calls that queue work: a convolution, its gradients, a bias
	Memsets     int64 `json:"memsets"`  // cuMemsetD32Async
	MemsetBytes int64 `json:"memset_bytes"`

	Allocs     int64 `json:"allocs"`      // device memory asked of the driver (cuMemAlloc): the pool's misses
	PoolHits   int64 `json:"pool_hits"`   // device allocations the pool served from its cache
	Frees      int64 `json:"frees"`       // device memory given back to the driver (cuMemFree)
	HostAllocs int64 `json:"host_allocs"` // pinned host memory asked of the driver (cuMemHostAlloc)

	// Same-host transfers between devices (ipc.go): allocations exported
	// (cuIpcGetMemHandle; each once), peers' handles opened
	// (cuIpcOpenMemHandle; each once), and copies from a peer's memory on
	// the copy stream.
	IPCExports int64 `json:"ipc_exports,omitempty"`
	IPCOpens   int64 `json:"ipc_opens,omitempty"`
	PeerCopies int64 `json:"peer_copies,omitempty"`
	PeerBytes  int64 `json:"peer_bytes,omitempty"`
}

// fields are c's counters, in declaration order.
func (c *Counts) fields() []*int64 {
	return []*int64{&c.Syncs, &c.Events, &c.H2DCalls, &c.H2DBytes, &c.D2HCalls, &c.D2HBytes,
		&c.PageableCopies, &c.PageableBytes, &c.PinnedCopies, &c.PinnedBytes, &c.D2DCalls, &c.D2DBytes,
		&c.Launches, &c.GEMMs, &c.DNN, &c.Memsets, &c.MemsetBytes, &c.Allocs, &c.PoolHits, &c.Frees, &c.HostAllocs,
		&c.IPCExports, &c.IPCOpens, &c.PeerCopies, &c.PeerBytes}
}

// Sub is c − o, counter by counter: what was asked between two snapshots.
func (c Counts) Sub(o Counts) Counts {
	a, b := c.fields(), o.fields()
	for i := range a {
		*a[i] -= *b[i]
	}
	return c
}

// Counts is a snapshot of what the device has been asked so far.
func (d *Device) Counts() Counts { return d.counts }

// hostCopy counts a copy of n bytes between the device and host memory,
// pinned or pageable; up says which way.
func (c *Counts) hostCopy(up, pinned bool, n uint64) {
	if up {
		c.H2DCalls++
		c.H2DBytes += int64(n)
	} else {
		c.D2HCalls++
		c.D2HBytes += int64(n)
	}
	if pinned {
		c.PinnedCopies++
		c.PinnedBytes += int64(n)
	} else {
		c.PageableCopies++
		c.PageableBytes += int64(n)
	}
}
