package cuda

import "fmt"

// The GPU's side of ipc.go: CUDA IPC through the driver.

func (g *gpu) ipcExport(p uint64) (IPCHandle, uint64, bool, error) {
	var base, size uint64
	if err := check("cuMemGetAddressRange", cuMemGetAddressRange(&base, &size, p)); err != nil {
		return IPCHandle{}, 0, false, err
	}
	if h, ok := g.exported[base]; ok {
		return h, p - base, false, nil
	}
	var h ipcMemHandle
	if err := check("cuIpcGetMemHandle", cuIpcGetMemHandle(&h, base)); err != nil {
		return IPCHandle{}, 0, false, err
	}
	if g.exported == nil {
		g.exported = map[uint64]IPCHandle{}
	}
	g.exported[base] = h.Reserved
	return h.Reserved, p - base, true, nil
}

func (g *gpu) ipcOpen(h IPCHandle) (uint64, error) {
	var p uint64
	return p, check("cuIpcOpenMemHandle", cuIpcOpenMemHandle(&p, ipcMemHandle{h}, ipcLazyPeerAccess))
}

func (g *gpu) ipcClose(p uint64) error { return check("cuIpcCloseMemHandle", cuIpcCloseMemHandle(p)) }

// peerCopy queues the copy on the copy stream behind an event of the
// stream (dst may be memory the stream's queued work still uses) and waits
// for it.
func (g *gpu) peerCopy(dst, src uint64, n uint64) error {
	if g.copyEv == 0 {
		if err := check("cuEventCreate", cuEventCreate(&g.copyEv, eventNoTiming)); err != nil {
			return err
		}
	}
	if err := check("cuEventRecord", cuEventRecord(g.copyEv, g.stream)); err != nil {
		return err
	}
	if err := check("cuStreamWaitEvent", cuStreamWaitEvent(g.copy, g.copyEv, 0)); err != nil {
		return err
	}
	if err := check("cuMemcpyDtoDAsync", cuMemcpyDtoDAsync(dst, src, n, g.copy)); err != nil {
		return err
	}
	return check("cuStreamSynchronize", cuStreamSynchronize(g.copy))
}

func (g *gpu) identity() string {
	id, err := uuidOf(g.dev)
	if err != nil {
		return fmt.Sprintf("GPU ordinal %d", g.dev) // still names it on this host
	}
	return id
}

// peers lists the other visible GPUs this one can access as a peer.
func (g *gpu) peers() []string {
	var n int32
	if cuDeviceGetCount(&n) != 0 {
		return nil
	}
	var out []string
	for o := int32(0); o < n; o++ {
		var dev int32
		if cuDeviceGet(&dev, o) != 0 || dev == g.dev {
			continue
		}
		var can int32
		if cuDeviceCanAccessPeer(&can, g.dev, dev) != 0 || can == 0 {
			continue
		}
		if id, err := uuidOf(dev); err == nil {
			out = append(out, id)
		}
	}
	return out
}

// uuidOf is a device's UUID as nvidia-smi writes it: GPU-xxxxxxxx-….
func uuidOf(dev int32) (string, error) {
	var u [16]byte
	if err := check("cuDeviceGetUuid", cuDeviceGetUuid(&u, dev)); err != nil {
		return "", err
	}
	b := u[:]
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}
