package cuda

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"unsafe"

	"github.com/graphpipe/graphpipe/internal/atomicfile"
	"github.com/graphpipe/graphpipe/tensor"
)

//go:embed kernels.cu
var kernelSource string

// Device is one GPU (or the emulator) with its memory pool and pinned
// staging buffers. A Device is used by one goroutine at a time, locked to
// its OS thread (runtime.LockOSThread) while it uses the device.
type Device struct {
	Ordinal  int
	Name     string
	Memory   uint64 // bytes
	Arch     string // sm_90; "emulator" for the CPU emulator
	SMs      int
	Emulated bool
	b        backend
	mem      *Pool[uint64]
	pinned   *Pool[unsafe.Pointer]
	bad      Buffer // an int the index kernels set on an out-of-range index
	counts   Counts // what the device was asked (counts.go)
	dnn      *dnn   // cuDNN for the convolutions (dnn.go); nil: im2col
	dnnErr   error  // why dnn is nil, on a GPU
	// the system's cuDNN is to be loaded at first use (dnnReady)
	dnnPending bool
	mu         sync.Mutex
	recorded   uint64    // events recorded so far (Event.seq)
	events     []uintptr // event handles waited for, to record again
	retiring   []retired // staging buffers of queued uploads (UploadAsync)
	// peers' allocations opened (ipc.go), and in the order they were
	opened    map[IPCHandle]uint64
	openOrder []IPCHandle
}

// retired is a staging buffer whose upload was queued after event number
// after: it goes back to the pool once a later event has passed.
type retired struct {
	st    Staging
	after uint64
}

// Exclusive takes the device for a sequence of calls (one op's) and returns
// the function that gives it back: workers that share a device in one
// process (tests, benchmarks) take turns op by op.
func (d *Device) Exclusive() func() {
	d.mu.Lock()
	return d.mu.Unlock
}

// Buffer is device memory holding N elements of 4 bytes (float32 or int32),
// or N halves for a 16-bit buffer.
type Buffer struct {
	Ptr uint64
	N   int // elements
	// Half: the elements are 16-bit (bf16 storage: a bf16 run's
	// activations and their gradients, a weight's bf16 copy), not float32
	Half bool
}

// Elem is the bytes of one of b's elements: 2 for a half buffer, else 4.
func (b Buffer) Elem() int {
	if b.Half {
		return 2
	}
	return 4
}

// Bytes is b's size in bytes.
func (b Buffer) Bytes() int { return b.N * b.Elem() }

// Offset is the view of b that starts k elements in.
func (b Buffer) Offset(k int) Buffer { return Buffer{b.Ptr + uint64(b.Elem()*k), b.N - k, b.Half} }

// Open loads the libraries (once) and opens GPU ordinal, as numbered after
// CUDA_VISIBLE_DEVICES.
func Open(ordinal int) (*Device, error) {
	n, err := Available()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("cuda: GPU %d does not exist: the driver sees %d", ordinal, n)
	}
	// the context is current per OS thread: set up on one
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	g := &gpu{funcs: map[string]uintptr{}}
	d := &Device{Ordinal: ordinal, b: g}
	if err := d.initGPU(g); err != nil {
		d.Close()
		return nil, err
	}
	d.attachDNN()
	return d, d.start()
}

func (d *Device) initGPU(g *gpu) error {
	if err := check("cuDeviceGet", cuDeviceGet(&g.dev, int32(d.Ordinal))); err != nil {
		return err
	}
	name := make([]byte, 256)
	if err := check("cuDeviceGetName", cuDeviceGetName(&name[0], int32(len(name)), g.dev)); err != nil {
		return err
	}
	d.Name = cString(&name[0])
	var major, minor, sms int32
	for _, a := range []struct {
		v    *int32
		attr int32
	}{{&major, attrComputeMajor}, {&minor, attrComputeMinor}, {&sms, attrSMCount}} {
		if err := check("cuDeviceGetAttribute", cuDeviceGetAttribute(a.v, a.attr, g.dev)); err != nil {
			return err
		}
	}
	d.Arch, d.SMs = fmt.Sprintf("sm_%d%d", major, minor), int(sms)
	g.arch = d.Arch
	if err := check("cuDeviceTotalMem", cuDeviceTotalMem(&d.Memory, g.dev)); err != nil {
		return err
	}
	if err := check("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&g.ctx, g.dev)); err != nil {
		return err
	}
	if err := g.bind(); err != nil {
		return err
	}
	if err := check("cuStreamCreate", cuStreamCreate(&g.stream, streamNonBlocking)); err != nil {
		return err
	}
	if err := check("cuStreamCreate", cuStreamCreate(&g.copy, streamNonBlocking)); err != nil {
		return err
	}
	if err := checkBLAS("cublasCreate", cublasCreate(&g.blas)); err != nil {
		return err
	}
	return checkBLAS("cublasSetStream", cublasSetStream(g.blas, g.stream))
}

// start sets up what every backend shares: the pools and the bad-index flag.
func (d *Device) start() error {
	d.mem = newPool[uint64](devAlloc{d.b, &d.counts})
	d.pinned = newPool[unsafe.Pointer](pinAlloc{d.b, &d.counts})
	var err error
	if d.bad, err = d.Zeros(1); err != nil {
		d.Close()
	}
	return err
}

// Bind makes the device current on the calling OS thread (a no-op on the
// emulator). Call it after runtime.LockOSThread in the goroutine that uses
// the device.
func (d *Device) Bind() error {
	if g, ok := d.b.(*gpu); ok {
		return g.bind()
	}
	return nil
}

// Close frees the device's memory and handles.
func (d *Device) Close() error {
	if d.b == nil {
		return nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = d.Bind()
	_ = d.b.sync()
	var err error
	if d.mem != nil {
		err = d.mem.Release()
	}
	if d.pinned != nil {
		if perr := d.pinned.Release(); err == nil {
			err = perr
		}
	}
	for _, e := range d.events {
		_ = d.b.freeEvent(e)
	}
	d.closeOpened()
	if d.dnn != nil {
		d.dnn.close()
		d.dnn = nil
	}
	d.events, d.retiring = nil, nil
	if cerr := d.b.close(); err == nil {
		err = cerr
	}
	d.b = nil
	return err
}

// Alloc takes room for n 4-byte elements from the pool; its contents are
// undefined (on the emulator, NaN until written: see gp_emu_alloc). Use it
// for what a kernel or a GEMM with beta 0 writes in full; Zeros for what is
// added into.
func (d *Device) Alloc(n int) (Buffer, error) {
	reused := d.mem.Stats.Reuses
	p, err := d.mem.Get(uint64(4 * max(n, 1)))
	d.counts.PoolHits += int64(d.mem.Stats.Reuses - reused)
	return Buffer{Ptr: p, N: n}, err
}

// Zeros allocates n zeroed 4-byte elements.
func (d *Device) Zeros(n int) (Buffer, error) {
	b, err := d.Alloc(n)
	if err == nil {
		err = d.memset(b.Ptr, uint64(max(n, 1)))
	}
	return b, err
}

// HalfZeros allocates n zeroed 16-bit elements.
func (d *Device) HalfZeros(n int) (Buffer, error) {
	b, err := d.HalfBuffer(n)
	if err == nil {
		err = d.memset(b.Ptr, words(b))
	}
	return b, err
}

// words is how many 4-byte words b's elements take (at least 1, as the
// pool hands out): a half buffer of an odd length ends in half a word.
func words(b Buffer) uint64 { return uint64(max((b.Bytes()+3)/4, 1)) }

// memset zeroes words 4-byte words at p.
func (d *Device) memset(p uint64, words uint64) error {
	d.counts.Memsets++
	d.counts.MemsetBytes += int64(4 * words)
	return d.b.zero(p, words)
}

// Memset zeroes b's n elements.
func (d *Device) Memset(b Buffer) error {
	if b.N == 0 {
		return nil
	}
	return d.memset(b.Ptr, words(b))
}

// Free returns b to the pool.
func (d *Device) Free(b Buffer) error { return d.mem.Put(b.Ptr) }

// MemStats is the device memory pool's accounting.
func (d *Device) MemStats() PoolStats { return d.mem.Stats }

// StagingStats is the pinned staging pool's accounting.
func (d *Device) StagingStats() PoolStats { return d.pinned.Stats }

// Upload copies src into a new buffer and waits for the copy.
func (d *Device) Upload(src []float32) (Buffer, error) {
	return upload(d, src)
}

// UploadInts copies int32s (indices, labels) into a new buffer.
func (d *Device) UploadInts(src []int32) (Buffer, error) {
	return upload(d, src)
}

func upload[T float32 | int32](d *Device, src []T) (Buffer, error) {
	b, err := d.Alloc(len(src))
	if err != nil || len(src) == 0 {
		return b, err
	}
	n := uint64(4 * len(src))
	d.counts.hostCopy(true, false, n)
	err = d.b.htod(b.Ptr, unsafe.Pointer(&src[0]), n)
	if err == nil {
		err = d.Sync() // src is Go memory: the copy must finish before we return
	}
	runtime.KeepAlive(src)
	if err != nil {
		_ = d.Free(b)
	}
	return b, err
}

// Write copies src into b's first len(src) elements from Go memory and
// waits (a pageable copy: for loading state, not for a step).
func (d *Device) Write(b Buffer, src []float32) error {
	if len(src) > b.N {
		return fmt.Errorf("cuda: write of %d elements into a buffer of %d", len(src), b.N)
	}
	if len(src) == 0 {
		return nil
	}
	if b.Half { // rounded to bf16 on the host
		bits := make([]uint16, len(src))
		tensor.PutBF16(bits, src)
		return hostWrite(d, b, bits)
	}
	return hostWrite(d, b, src)
}

// hostWrite copies src into b from Go memory and waits.
func hostWrite[T float32 | uint16](d *Device, b Buffer, src []T) error {
	n := uint64(unsafe.Sizeof(src[0])) * uint64(len(src))
	d.counts.hostCopy(true, false, n)
	err := d.b.htod(b.Ptr, unsafe.Pointer(&src[0]), n)
	if err == nil {
		err = d.Sync()
	}
	runtime.KeepAlive(src)
	return err
}

// Download copies the first len(dst) elements of b into dst and waits.
func (d *Device) Download(dst []float32, b Buffer) error {
	if len(dst) > b.N {
		return fmt.Errorf("cuda: download of %d elements from a buffer of %d", len(dst), b.N)
	}
	if len(dst) == 0 {
		return nil
	}
	if b.Half { // widened on the host
		bits := make([]uint16, len(dst))
		err := hostRead(d, bits, b)
		tensor.GetBF16(dst, bits)
		return err
	}
	return hostRead(d, dst, b)
}

// hostRead copies len(dst) elements of b into Go memory and waits.
func hostRead[T float32 | uint16](d *Device, dst []T, b Buffer) error {
	n := uint64(unsafe.Sizeof(dst[0])) * uint64(len(dst))
	d.counts.hostCopy(false, false, n)
	err := d.b.dtoh(unsafe.Pointer(&dst[0]), b.Ptr, n)
	if err == nil {
		err = d.Sync()
	}
	runtime.KeepAlive(dst)
	return err
}

// Vec4 says whether n floats at each of bufs can go through the kernels
// that move four at a time (kernels.cu's gp_*4, given n/4): n a multiple
// of 4 and every buffer float32 and 16-byte aligned (the pool's blocks
// are; a view at an offset may not be).
func Vec4(n int, bufs ...Buffer) bool {
	if n%4 != 0 {
		return false
	}
	for _, b := range bufs {
		if b.Ptr%16 != 0 || b.Half {
			return false
		}
	}
	return true
}

// Copy copies n elements from src to dst on the device; both hold
// elements of one size.
func (d *Device) Copy(dst, src Buffer, n int) error {
	if n > dst.N || n > src.N {
		return fmt.Errorf("cuda: copy of %d elements between buffers of %d and %d", n, src.N, dst.N)
	}
	if dst.Half != src.Half {
		return fmt.Errorf("cuda: copy between a buffer of %d-byte and one of %d-byte elements", src.Elem(), dst.Elem())
	}
	d.counts.D2DCalls++
	d.counts.D2DBytes += int64(src.Elem() * n)
	return d.b.dtod(dst.Ptr, src.Ptr, uint64(src.Elem()*n))
}

// Sync waits for everything queued on the device; the staging buffers of
// the uploads queued so far go back to the pool.
func (d *Device) Sync() error {
	d.counts.Syncs++
	err := d.b.sync()
	if err == nil {
		d.reclaim(d.recorded + 1)
	}
	return err
}

// Event is a point in the device's queue (Record): the work queued before
// it is done once it has passed (Wait).
type Event struct {
	h   uintptr
	seq uint64 // its number among the device's events, from 1
}

// Record marks the point the queue has reached: Wait for the returned
// event waits for the work queued so far and not for what is queued later.
func (d *Device) Record() (Event, error) {
	var h uintptr
	if n := len(d.events); n > 0 {
		h, d.events = d.events[n-1], d.events[:n-1]
	} else {
		var err error
		if h, err = d.b.newEvent(); err != nil {
			return Event{}, err
		}
	}
	d.recorded++
	d.counts.Events++
	return Event{h, d.recorded}, d.b.record(h)
}

// Wait blocks until e has passed (counted as a sync); the staging buffers
// of the uploads queued before it go back to the pool. Wait for an event
// once: its handle is recorded again by a later Record.
func (d *Device) Wait(e Event) error {
	d.counts.Syncs++
	err := d.b.waitEvent(e.h)
	if err == nil {
		d.events = append(d.events, e.h)
		d.reclaim(e.seq)
	}
	return err
}

// WaitFree waits for e as Wait does, for a goroutine other than the
// device's user (a sender of frames): it holds the device only for the
// bookkeeping after the wait, so the user queues work meanwhile. It binds
// the device on its own thread.
func (d *Device) WaitFree(e Event) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	err := d.Bind()
	if err == nil {
		err = d.b.waitEvent(e.h)
	}
	defer d.Exclusive()()
	d.counts.Syncs++
	if err == nil {
		d.events = append(d.events, e.h)
		d.reclaim(e.seq)
	}
	return err
}

// reclaim gives back the staging buffers of the uploads queued before
// event number seq.
func (d *Device) reclaim(seq uint64) {
	kept := d.retiring[:0]
	for _, r := range d.retiring {
		if r.after < seq {
			_ = d.pinned.Put(r.st.ptr)
			continue
		}
		kept = append(kept, r)
	}
	clear(d.retiring[len(kept):])
	d.retiring = kept
}

// UploadAsync copies src into a new buffer through a pinned staging
// buffer: the host copies src there, the device queues the staging
// buffer's copy, and the call returns without waiting. The staging buffer
// goes back to the pool when the copy is known to be done (the next Sync,
// or Wait for an event recorded after it), so that a step's uploads reuse
// the last step's staging memory.
func (d *Device) UploadAsync(src []float32) (Buffer, error) { return uploadAsync(d, src) }

// UploadIntsAsync is UploadAsync for int32s (indices, labels).
func (d *Device) UploadIntsAsync(src []int32) (Buffer, error) { return uploadAsync(d, src) }

// CopyIn queues a copy of src into b through a pinned staging buffer, as
// UploadAsync does.
func (d *Device) CopyIn(b Buffer, src []float32) error { return copyIn(d, b, src) }

// UploadHalfAsync is UploadAsync into a new half buffer: src rounded to
// bf16 (tensor.ToBF16) as the host copies it into the staging buffer.
func (d *Device) UploadHalfAsync(src []float32) (Buffer, error) {
	b, err := d.HalfBuffer(len(src))
	if err != nil || len(src) == 0 {
		return b, err
	}
	st, err := d.Stage(2 * len(src))
	if err != nil {
		_ = d.Free(b)
		return b, err
	}
	tensor.PutBF16(st.Uint16s(), src)
	if err := d.UploadStaged(b, st); err != nil {
		_ = d.Unstage(st)
		_ = d.Free(b)
		return b, err
	}
	d.retiring = append(d.retiring, retired{st, d.recorded})
	return b, nil
}

func uploadAsync[T float32 | int32](d *Device, src []T) (Buffer, error) {
	b, err := d.Alloc(len(src))
	if err == nil {
		if err = copyIn(d, b, src); err != nil {
			_ = d.Free(b)
		}
	}
	return b, err
}

func copyIn[T float32 | int32](d *Device, b Buffer, src []T) error {
	if len(src) > b.N {
		return fmt.Errorf("cuda: upload of %d elements into a buffer of %d", len(src), b.N)
	}
	if len(src) == 0 {
		return nil
	}
	st, err := d.Stage(4 * len(src))
	if err != nil {
		return err
	}
	copy(unsafe.Slice((*T)(st.ptr), len(src)), src)
	if err := d.UploadStaged(b, st); err != nil {
		_ = d.Unstage(st)
		return err
	}
	d.retiring = append(d.retiring, retired{st, d.recorded})
	return nil
}

// BadFlag is the int the index kernels set on an out-of-range index; pass
// it as their bad argument.
func (d *Device) BadFlag() Buffer { return d.bad }

// BadIndex reports, and clears, whether an index kernel met an index out
// of range since the last call.
func (d *Device) BadIndex() (bool, error) {
	var v [1]float32
	if err := d.Download(v[:], d.bad); err != nil {
		return false, err
	}
	if v[0] == 0 {
		return false, nil
	}
	return true, d.memset(d.bad.Ptr, 1)
}

// Staging is a pinned host buffer for moving a frame's tensor bytes
// between NATS and the device without the driver's own bounce copy.
type Staging struct {
	ptr unsafe.Pointer
	n   int
}

// Bytes is the buffer's memory.
func (s Staging) Bytes() []byte { return unsafe.Slice((*byte)(s.ptr), s.n) }

// Float32s is the buffer's memory as float32s (n/4 of them).
func (s Staging) Float32s() []float32 { return unsafe.Slice((*float32)(s.ptr), s.n/4) }

// Uint16s is the buffer's memory as 16-bit values (n/2 of them): a half
// buffer's staged elements.
func (s Staging) Uint16s() []uint16 { return unsafe.Slice((*uint16)(s.ptr), s.n/2) }

// Slice is the n bytes of s from off.
func (s Staging) Slice(off, n int) Staging {
	if off < 0 || n < 0 || off+n > s.n {
		panic(fmt.Sprintf("cuda: staging slice [%d, %d) of %d bytes", off, off+n, s.n))
	}
	return Staging{unsafe.Add(s.ptr, off), n}
}

// Stage takes a pinned buffer of n bytes; Unstage gives it back.
func (d *Device) Stage(n int) (Staging, error) {
	p, err := d.pinned.Get(uint64(max(n, 1)))
	return Staging{p, n}, err
}

// Unstage returns a staging buffer to the pool.
func (d *Device) Unstage(s Staging) error { return d.pinned.Put(s.ptr) }

// UploadStaged queues a copy of a staging buffer into b; the staging
// buffer must stay untouched until Sync.
func (d *Device) UploadStaged(b Buffer, s Staging) error {
	if uint64(s.n) > uint64(b.Bytes()) {
		return fmt.Errorf("cuda: %d staged bytes do not fit a buffer of %d elements", s.n, b.N)
	}
	d.counts.hostCopy(true, true, uint64(s.n))
	return d.b.htod(b.Ptr, s.ptr, uint64(s.n))
}

// DownloadStaged queues a copy of b into a staging buffer; its bytes are
// valid after Sync, or Wait for an event recorded after it.
func (d *Device) DownloadStaged(s Staging, b Buffer) error {
	if uint64(s.n) > uint64(b.Bytes()) {
		return fmt.Errorf("cuda: %d staged bytes exceed a buffer of %d elements", s.n, b.N)
	}
	d.counts.hostCopy(false, true, uint64(s.n))
	return d.b.dtoh(s.ptr, b.Ptr, uint64(s.n))
}

// cubin compiles kernels.cu for arch, or reads it from the cache.
func cubin(arch string) ([]byte, error) {
	path := kernelCache(arch)
	if image, err := os.ReadFile(path); err == nil && len(image) > 0 {
		return image, nil
	}
	image, err := compile(kernelSource, "kernels.cu", arch)
	if err != nil {
		return nil, err
	}
	if path != "" && os.MkdirAll(filepath.Dir(path), 0o755) == nil {
		// a cache: a failed write costs the next process a compile
		_ = atomicfile.WriteFile(path, image, 0o644)
	}
	return image, nil
}

// kernelCache is the CUBIN's path, keyed by source, arch and NVRTC version.
func kernelCache(arch string) string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	var maj, min int32
	nvrtcVersion(&maj, &min)
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00nvrtc %d.%d", kernelSource, arch, maj, min)))
	return filepath.Join(dir, "graphpipe", "cuda", hex.EncodeToString(sum[:12])+"-"+arch+".cubin")
}

// Launch runs kernel name of kernels.cu over n work items, 256 threads to a
// block. args follow the kernel's parameters: Buffer (its pointer), int
// (passed as a 64-bit long), int32, float32, float64 (a double).
func (d *Device) Launch(name string, n int, args ...any) error {
	if err := checkArgs(name, args); err != nil {
		return err
	}
	params := make([]unsafe.Pointer, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case Buffer:
			p := v.Ptr
			params[i] = unsafe.Pointer(&p)
		case int:
			w := int64(v)
			params[i] = unsafe.Pointer(&w)
		case int32:
			params[i] = unsafe.Pointer(&v)
		case float32:
			params[i] = unsafe.Pointer(&v)
		case float64:
			params[i] = unsafe.Pointer(&v)
		default:
			return fmt.Errorf("cuda: launch %s: argument %d has type %T", name, i, a)
		}
	}
	const block = 256
	grid := min(max((n+block-1)/block, 1), 65535)
	d.counts.Launches++
	return d.b.launch(name, grid, block, params)
}
