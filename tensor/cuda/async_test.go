package cuda

import (
	"slices"
	"testing"
)

// TestAsyncUploadsEmulated: an upload through pinned staging returns at
// once and its staging buffer stays out of the pool until an event
// recorded after it has passed (Wait) or the device is synchronised; then
// the next upload takes it again: a step's uploads reuse the last step's
// staging memory, with no pinned allocation. Each call counts what it asks.
func TestAsyncUploadsEmulated(t *testing.T) {
	d := emulator(t)
	bindHere(t, d)
	const n = 100
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(i)
	}
	var a, b Buffer
	var ev Event
	var err error
	steps := []struct {
		name string
		f    func() error
		want Counts
	}{
		{"upload async: a buffer, a staging buffer, a pinned copy, no wait", func() error { a, err = d.UploadAsync(src); return err },
			Counts{Allocs: 1, HostAllocs: 1, H2DCalls: 1, H2DBytes: 4 * n, PinnedCopies: 1, PinnedBytes: 4 * n}},
		{"again before any wait: the first staging buffer is not free yet", func() error { b, err = d.UploadIntsAsync(make([]int32, n)); return err },
			Counts{Allocs: 1, HostAllocs: 1, H2DCalls: 1, H2DBytes: 4 * n, PinnedCopies: 1, PinnedBytes: 4 * n}},
		{"record", func() error { ev, err = d.Record(); return err }, Counts{Events: 1}},
		{"wait: a sync; both staging buffers back in the pool", func() error { return d.Wait(ev) }, Counts{Syncs: 1}},
		{"copy in: the pool serves the staging buffer", func() error { return d.CopyIn(b, src) },
			Counts{H2DCalls: 1, H2DBytes: 4 * n, PinnedCopies: 1, PinnedBytes: 4 * n}},
		{"copy in: and the other", func() error { return d.CopyIn(b, src) },
			Counts{H2DCalls: 1, H2DBytes: 4 * n, PinnedCopies: 1, PinnedBytes: 4 * n}},
		{"sync: every staging buffer back", d.Sync, Counts{Syncs: 1}},
		{"record again: the event handle is reused", func() error { ev, err = d.Record(); return err }, Counts{Events: 1}},
		{"write: pageable, waited for", func() error { return d.Write(a, src) },
			Counts{H2DCalls: 1, H2DBytes: 4 * n, PageableCopies: 1, PageableBytes: 4 * n, Syncs: 1}},
		{"memset", func() error { return d.Memset(Buffer{Ptr: b.Ptr, N: n / 2}) }, Counts{Memsets: 1, MemsetBytes: 2 * n}},
		{"refused: copy in past the end", func() error {
			if d.CopyIn(Buffer{Ptr: a.Ptr, N: 1}, src) == nil {
				t.Error("a copy of 100 elements into 1 was accepted")
			}
			return nil
		}, Counts{}},
	}
	for _, s := range steps {
		before := d.Counts()
		if err := s.f(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := d.Counts().Sub(before); got != s.want {
			t.Errorf("%s: counted\n  %+v\nwant\n  %+v", s.name, got, s.want)
		}
	}
	got := make([]float32, n)
	if err := d.Download(got, b); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got[n/2:], src[n/2:]) || slices.ContainsFunc(got[:n/2], func(v float32) bool { return v != 0 }) {
		t.Errorf("copied in, then half zeroed: %v", got)
	}
	if st := d.StagingStats(); st.InUse != 0 || st.Reuses != 2 {
		t.Errorf("staging: %d bytes in use, %d reuses; want none in use and 2", st.InUse, st.Reuses)
	}
}

// TestRoundedWithAWeightsCopyEmulated: a product given a 16-bit copy of B
// (Round, once) converts only A, and computes what GemmRounded does.
func TestRoundedWithAWeightsCopyEmulated(t *testing.T) {
	d := emulator(t)
	bindHere(t, d)
	a, _ := d.Upload([]float32{1.001, 2, 3, 4, 5, 6})
	w, _ := d.Upload([]float32{0.5, 1.003, -2, 0.25, 3, 1})
	c1, _ := d.Zeros(4)
	c2, _ := d.Zeros(4)
	g := GemmArgs{M: 2, N: 2, K: 3, Alpha: 1, A: a, B: w}
	g.C = c1
	if err := d.GemmRounded(g, BF16); err != nil {
		t.Fatal(err)
	}
	wh, err := d.Round(w, BF16)
	if err != nil {
		t.Fatal(err)
	}
	g.C = c2
	before := d.Counts()
	if err := d.GemmRoundedWith(g, BF16, Buffer{}, wh, 0, 0, 0, 1); err != nil {
		t.Fatal(err)
	}
	if c := d.Counts().Sub(before); c.Launches != 1 || c.GEMMs != 1 {
		t.Errorf("a product with B's copy given: %d conversions and %d GEMMs, want 1 and 1", c.Launches, c.GEMMs)
	}
	x, y := make([]float32, 4), make([]float32, 4)
	d.Download(x, c1)
	d.Download(y, c2)
	if !slices.Equal(x, y) {
		t.Errorf("with the copy given %v, rounded per call %v", y, x)
	}
	if d.GemmRoundedWith(g, BF16, Buffer{}, Buffer{Ptr: wh.Ptr, N: 2, Half: true}, 0, 0, 0, 1) == nil {
		t.Error("a 16-bit copy too short for the product was accepted")
	}
}

// TestDryDevice: a dry device counts what it is asked, as the emulator
// does, and computes nothing: memory is made up, pinned memory is the
// host's.
func TestDryDevice(t *testing.T) {
	d, err := OpenDry()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	before := d.Counts()
	b, err := d.UploadAsync(make([]float32, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Launch("a kernel no one compiled", 10, b); err != nil {
		t.Fatal(err)
	}
	ev, _ := d.Record()
	if err := d.Wait(ev); err != nil {
		t.Fatal(err)
	}
	want := Counts{Allocs: 1, HostAllocs: 1, H2DCalls: 1, H2DBytes: 4 << 20, PinnedCopies: 1, PinnedBytes: 4 << 20, Launches: 1, Events: 1, Syncs: 1}
	if got := d.Counts().Sub(before); got != want {
		t.Errorf("counted %+v, want %+v", got, want)
	}
}
