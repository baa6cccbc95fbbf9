package cuda

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The emulator's device memory is one shared memory arena per device: an
// anonymous memory file (memfd) mapped shared, sized far beyond use and
// filled only where written, so that another process on the host opens it
// through /proc/PID/fd and reads the device's buffers where they lie: the
// emulator's CUDA IPC (ipc.go). Allocations are carved from it: a freed
// block waits on the free list of its size (the Pool above already keeps
// blocks by size class, so the list stays short).

// arenaBytes is the address space an arena reserves, and arenaLeast the
// least it settles for where the process's address space is limited; its
// memory is taken only as it is written.
const (
	arenaBytes = 1 << 38
	arenaLeast = 1 << 32
)

// arenaMagic opens an emulator's handle: "gpemu", version 1.
var arenaMagic = [8]byte{'g', 'p', 'e', 'm', 'u', 0, 0, 1}

type arena struct {
	fd   int
	mem  []byte // the mapping
	base uint64
	id   uint64 // random: tells this arena from one that reused its pid and fd
	mu   sync.Mutex
	next uint64              // the first byte never handed out
	free map[uint64][]uint64 // offsets of freed blocks, by size
	size map[uint64]uint64   // offset → size of each block handed out
}

func newArena() (*arena, error) {
	fd, err := unix.MemfdCreate("graphpipe-cuda-emulator", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("cuda: emulator: device memory (memfd_create): %w", err)
	}
	var mem []byte
	for size := arenaBytes; ; size /= 4 {
		if err = unix.Ftruncate(fd, int64(size)); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("cuda: emulator: device memory (ftruncate): %w", err)
		}
		if mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_NORESERVE); err == nil {
			break
		}
		if size/4 < arenaLeast {
			unix.Close(fd)
			return nil, fmt.Errorf("cuda: emulator: device memory (mmap of %d bytes): %w", size, err)
		}
	}
	var id [8]byte
	rand.Read(id[:])
	copy(mem, id[:]) // its first bytes name it: an opener checks them against the handle's
	return &arena{fd: fd, mem: mem, base: uint64(uintptr(unsafe.Pointer(&mem[0]))), id: binary.LittleEndian.Uint64(id[:]),
		next: 256, free: map[uint64][]uint64{}, size: map[uint64]uint64{}}, nil
}

// alloc carves n bytes (rounded up to 256) and fills them with 0xff bytes,
// as gp_emu_alloc did: new device memory reads as NaN.
func (a *arena) alloc(n uint64) (uint64, error) {
	n = max((n+255)&^255, 256)
	a.mu.Lock()
	var off uint64
	if l := a.free[n]; len(l) > 0 {
		off, a.free[n] = l[len(l)-1], l[:len(l)-1]
	} else if a.next+n <= uint64(len(a.mem)) {
		off, a.next = a.next, a.next+n
	} else {
		a.mu.Unlock()
		return 0, &Error{Call: "gp_emu_alloc", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY"}
	}
	a.size[off] = n
	a.mu.Unlock()
	fill(a.mem[off:off+n], 0xff)
	return a.base + off, nil
}

func (a *arena) release(p uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	off := p - a.base
	n, ok := a.size[off]
	if !ok {
		return &Error{Call: "gp_emu_free", Code: 1, Name: "CUDA_ERROR_INVALID_VALUE"}
	}
	delete(a.size, off)
	a.free[n] = append(a.free[n], off)
	return nil
}

// fill sets every byte of b to v, doubling a copy.
func fill(b []byte, v byte) {
	if len(b) == 0 {
		return
	}
	b[0] = v
	for k := 1; k < len(b); k *= 2 {
		copy(b[k:], b[:k])
	}
}

func (a *arena) close() {
	if a.mem != nil {
		unix.Munmap(a.mem)
		unix.Close(a.fd)
		a.mem = nil
	}
}

// handle names the arena for another process: the magic, the pid and fd
// it is open under, its id.
func (a *arena) handle() IPCHandle {
	var h IPCHandle
	copy(h[:8], arenaMagic[:])
	binary.LittleEndian.PutUint32(h[8:], uint32(os.Getpid()))
	binary.LittleEndian.PutUint32(h[12:], uint32(a.fd))
	binary.LittleEndian.PutUint64(h[16:], a.id)
	return h
}

// peerArena is another process's arena, mapped here.
type peerArena struct {
	mem []byte
}

// openArena maps the arena h names, from its process's open file.
func openArena(h IPCHandle) (*peerArena, error) {
	if [8]byte(h[:8]) != arenaMagic {
		return nil, fmt.Errorf("cuda: emulator: not an emulator's memory handle")
	}
	pid, fd := binary.LittleEndian.Uint32(h[8:]), binary.LittleEndian.Uint32(h[12:])
	path := fmt.Sprintf("/proc/%d/fd/%d", pid, fd)
	f, err := os.Open(path) // read only: a peer's memory is copied from, never written
	if err != nil {
		return nil, fmt.Errorf("cuda: emulator: opening a peer's device memory: %w", err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("cuda: emulator: %s: %w", path, err)
	}
	if st.Size < arenaLeast || st.Size > arenaBytes {
		return nil, fmt.Errorf("cuda: emulator: %s is not a peer's device memory (%d bytes)", path, st.Size)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("cuda: emulator: mapping %s: %w", path, err)
	}
	if binary.LittleEndian.Uint64(mem) != binary.LittleEndian.Uint64(h[16:]) {
		unix.Munmap(mem)
		return nil, fmt.Errorf("cuda: emulator: %s is no longer the device memory the handle names (its process is gone)", path)
	}
	return &peerArena{mem: mem}, nil
}

// The emulator's side of ipc.go.

func (e *emu) ipcExport(p uint64) (IPCHandle, uint64, bool, error) {
	fresh := !e.exported
	e.exported = true
	return e.arena.handle(), p - e.arena.base, fresh, nil
}

func (e *emu) ipcOpen(h IPCHandle) (uint64, error) {
	pa, err := openArena(h)
	if err != nil {
		return 0, err
	}
	p := uint64(uintptr(unsafe.Pointer(&pa.mem[0])))
	if e.peerArenas == nil {
		e.peerArenas = map[uint64]*peerArena{}
	}
	e.peerArenas[p] = pa
	return p, nil
}

func (e *emu) ipcClose(p uint64) error {
	if pa := e.peerArenas[p]; pa != nil {
		delete(e.peerArenas, p)
		return unix.Munmap(pa.mem)
	}
	return nil
}

func (e *emu) peerCopy(dst, src uint64, n uint64) error {
	e.copyDD(dst, src, n)
	return nil
}

// identity: every emulator on the host opens every other's memory.
func (e *emu) identity() string { return "emulator" }
func (e *emu) peers() []string  { return nil }
