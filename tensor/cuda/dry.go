package cuda

import "unsafe"

// dry is the backend of OpenDry: it computes nothing and holds no device
// memory, so that the driver calls of a step of a model too large for the
// emulator (the paper's MMT: 441 M parameters) are counted in seconds. The
// counting is above the backend (Counts): a dry Device is asked, and counts,
// what a GPU would be asked by the same host code. Device addresses are
// made up and never read; pinned host memory is Go memory, which the host
// reads and writes as usual; what comes down from the device is whatever the
// host buffer held (zeros when new), so a dry step takes the host's fast
// path (finite values), as a healthy step on a GPU does.
type dry struct{ next uint64 }

// OpenDry opens a Device that counts what it is asked and computes nothing
// (see dry): for pricing a step's driver calls without a GPU, never for
// results.
func OpenDry() (*Device, error) {
	d := &Device{Name: "dry run (counts only)", Arch: "dry", Emulated: true, b: &dry{next: 1 << 40}}
	return d, d.start()
}

func (b *dry) alloc(n uint64) (uint64, error) {
	p := b.next
	b.next += (n + 255) &^ 255
	return p, nil
}

func (b *dry) free(uint64) error { return nil }

func (b *dry) hostAlloc(n uint64) (unsafe.Pointer, error) {
	m := make([]byte, n)
	return unsafe.Pointer(&m[0]), nil
}

func (b *dry) hostFree(unsafe.Pointer) error                   { return nil }
func (b *dry) htod(uint64, unsafe.Pointer, uint64) error       { return nil }
func (b *dry) dtoh(unsafe.Pointer, uint64, uint64) error       { return nil }
func (b *dry) dtod(uint64, uint64, uint64) error               { return nil }
func (b *dry) zero(uint64, uint64) error                       { return nil }
func (b *dry) launch(string, int, int, []unsafe.Pointer) error { return nil }
func (b *dry) sync() error                                     { return nil }
func (b *dry) close() error                                    { return nil }
func (b *dry) sgemm(int32, int32, int32, int32, int32, float32, uint64, int32, uint64, int32, float32, uint64, int32) error {
	return nil
}
func (b *dry) sgemmBatched(int32, int32, int32, int32, int32, float32, uint64, int32, int64, uint64, int32, int64, float32, uint64, int32, int64, int32) error {
	return nil
}
func (b *dry) gemmEx(int32, int32, int32, int32, int32, int32, int32, int32, float32, uint64, int32, uint64, int32, float32, uint64, int32) error {
	return nil
}
func (b *dry) gemmExBatched(int32, int32, int32, int32, int32, int32, int32, int32, float32, uint64, int32, int64, uint64, int32, int64, float32, uint64, int32, int64, int32) error {
	return nil
}

func (b *dry) newEvent() (uintptr, error) { return 0, nil }
func (b *dry) record(uintptr) error       { return nil }
func (b *dry) waitEvent(uintptr) error    { return nil }
func (b *dry) freeEvent(uintptr) error    { return nil }
