package cuda

import (
	"errors"
	"fmt"
)

// Same-host transfers between devices: a process exports the allocation
// that holds a buffer as an IPCHandle (CUDA IPC, cuIpcGetMemHandle), sends
// it to a process on the same host with the buffer's offset and length, and
// that one opens the handle (cuIpcOpenMemHandle; once per handle, then
// kept) and copies from the peer's memory into its own on its copy stream,
// device to device. The bytes never cross the host. On the emulator the
// device memory lives in a shared memory arena (emuarena.go) that the
// handle names, and the same calls work between processes.
//
// The exporter must not change or free the buffer until the importer says
// its copy is done: what the runtime's links acknowledge.

// IPCHandle names an allocation of device memory for another process on
// the same host: CUDA's 64-byte handle, or the emulator's arena.
type IPCHandle [64]byte

// ipcBackend is a backend that moves device memory between processes.
type ipcBackend interface {
	// ipcExport is the handle of the allocation holding p, and p's offset
	// in it; fresh says the allocation was not exported before.
	ipcExport(p uint64) (h IPCHandle, off uint64, fresh bool, err error)
	// ipcOpen maps the allocation h names into this process.
	ipcOpen(h IPCHandle) (uint64, error)
	ipcClose(p uint64) error
	// peerCopy copies n bytes from src (a peer's memory, opened) to dst on
	// the copy stream, after the work queued on the device's stream, and
	// waits for the copy.
	peerCopy(dst, src uint64, n uint64) error
	// identity is the device's: a GPU's UUID, or the emulator's; peers the
	// identities of the other devices it reaches as a peer.
	identity() string
	peers() []string
}

// ErrNoIPC is a device that cannot share its memory with another process
// (the dry-run device).
var ErrNoIPC = errors.New("cuda: this device shares no memory with other processes")

// maxOpened bounds the peers' allocations kept open: the oldest is closed
// past it.
const maxOpened = 256

// Export returns the handle of the allocation holding b, and b's byte offset
// in it, for a process on this host to copy from (CopyFromPeer).
func (d *Device) Export(b Buffer) (IPCHandle, uint64, error) {
	ib, ok := d.b.(ipcBackend)
	if !ok {
		return IPCHandle{}, 0, ErrNoIPC
	}
	h, off, fresh, err := ib.ipcExport(b.Ptr)
	if fresh && err == nil {
		d.counts.IPCExports++
	}
	return h, off, err
}

// CopyFromPeer copies n 4-byte elements of a peer's memory, off bytes into
// the allocation h names, into b: on the device's copy stream, after the
// work queued on its stream (which may still use b's memory), and waits for
// the copy, so that the peer may reuse its buffer as soon as this returns.
// h is opened at its first use and kept (up to maxOpened).
func (d *Device) CopyFromPeer(b Buffer, h IPCHandle, off uint64, n int) error {
	ib, ok := d.b.(ipcBackend)
	if !ok {
		return ErrNoIPC
	}
	if n > b.N {
		return fmt.Errorf("cuda: a peer copy of %d elements into a buffer of %d", n, b.N)
	}
	base, err := d.open(ib, h)
	if err != nil || n == 0 {
		return err
	}
	d.counts.PeerCopies++
	d.counts.PeerBytes += int64(b.Elem() * n)
	return ib.peerCopy(b.Ptr, base+off, uint64(b.Elem()*n))
}

// open is the peer allocation h names, mapped here, opened at its first use.
func (d *Device) open(ib ipcBackend, h IPCHandle) (uint64, error) {
	if p, ok := d.opened[h]; ok {
		return p, nil
	}
	p, err := ib.ipcOpen(h)
	if err != nil {
		return 0, err
	}
	d.counts.IPCOpens++
	if d.opened == nil {
		d.opened = map[IPCHandle]uint64{}
	}
	if len(d.openOrder) >= maxOpened {
		old := d.openOrder[0]
		d.openOrder = d.openOrder[1:]
		_ = ib.ipcClose(d.opened[old])
		delete(d.opened, old)
	}
	d.opened[h] = p
	d.openOrder = append(d.openOrder, h)
	return p, nil
}

// closeOpened closes every peer allocation opened.
func (d *Device) closeOpened() {
	ib, ok := d.b.(ipcBackend)
	for _, h := range d.openOrder {
		if ok {
			_ = ib.ipcClose(d.opened[h])
		}
	}
	d.opened, d.openOrder = nil, nil
}

// Identity names the device among those of its host: a GPU's UUID
// ("GPU-…"), "emulator" for the CPU emulator (whose memory any process on
// the host opens), "" for a device that shares none.
func (d *Device) Identity() string {
	if ib, ok := d.b.(ipcBackend); ok {
		return ib.identity()
	}
	return ""
}

// PeerIdentities are the other devices of the host this one reaches as a
// peer (cuDeviceCanAccessPeer): what a buffer of theirs can be copied from.
func (d *Device) PeerIdentities() []string {
	if ib, ok := d.b.(ipcBackend); ok {
		return ib.peers()
	}
	return nil
}
