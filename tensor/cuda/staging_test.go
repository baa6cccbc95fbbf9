package cuda

import (
	"encoding/binary"
	"math"
	"testing"
)

// TestStagingRoundTrip: bytes put in a pinned staging buffer reach the
// device and come back through another, and staging buffers are reused.
func TestStagingRoundTrip(t *testing.T) {
	d := emulator(t)
	const n = 1000
	in, err := d.Stage(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(in.Bytes()[4*i:], math.Float32bits(float32(i)*0.5))
	}
	b, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.UploadStaged(b, in); err != nil {
		t.Fatal(err)
	}
	if err := d.Launch("gp_axpy", n, b, b, float32(1), n); err != nil { // b += b
		t.Fatal(err)
	}
	out, _ := d.Stage(4 * n)
	if err := d.DownloadStaged(out, b); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(out.Bytes()[4*i:])); got != float32(i) {
			t.Fatalf("element %d: %v, want %v", i, got, float32(i))
		}
	}
	if err := d.UploadStaged(Buffer{Ptr: b.Ptr, N: n - 1}, in); err == nil {
		t.Error("4000 staged bytes were accepted into a buffer of 999 elements")
	}
	d.Unstage(in)
	again, _ := d.Stage(4 * n)
	if again.ptr != in.ptr || d.pinned.Stats.Reuses != 1 {
		t.Errorf("a returned staging buffer was not reused (reuses %d)", d.pinned.Stats.Reuses)
	}
}
