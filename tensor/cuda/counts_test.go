package cuda

import (
	"encoding/json"
	"reflect"
	"regexp"
	"testing"
)

// TestCountsEmulated: each call of a known sequence moves exactly the
// counters it asks the driver for, and no other (every step compares the
// whole difference, so a counter left unwired, or moved by the wrong call,
// fails its step); calls refused before reaching the driver count nothing.
func TestCountsEmulated(t *testing.T) {
	d := emulator(t)
	bindHere(t, d)
	const n = 100 // elements: 400 bytes, one 512-byte size class
	var a, b, c Buffer
	var st Staging
	var err error
	steps := []struct {
		name string
		f    func() error
		want Counts
	}{
		{"alloc, a pool miss", func() error { a, err = d.Alloc(n); return err }, Counts{Allocs: 1}},
		{"free to the pool", func() error { return d.Free(a) }, Counts{}},
		{"alloc, a pool hit", func() error { a, err = d.Alloc(n); return err }, Counts{PoolHits: 1}},
		{"zeros", func() error { b, err = d.Zeros(n); return err }, Counts{Allocs: 1, Memsets: 1, MemsetBytes: 4 * n}},
		{"upload", func() error { c, err = d.Upload(make([]float32, n)); return err },
			Counts{Allocs: 1, H2DCalls: 1, H2DBytes: 4 * n, PageableCopies: 1, PageableBytes: 4 * n, Syncs: 1}},
		{"upload ints, empty", func() error { _, err = d.UploadInts(nil); return err }, Counts{Allocs: 1}},
		{"download", func() error { return d.Download(make([]float32, n), c) },
			Counts{D2HCalls: 1, D2HBytes: 4 * n, PageableCopies: 1, PageableBytes: 4 * n, Syncs: 1}},
		{"device copy", func() error { return d.Copy(a, c, n) }, Counts{D2DCalls: 1, D2DBytes: 4 * n}},
		{"launch", func() error { return d.Launch("gp_fill", n, a, float32(1), n) }, Counts{Launches: 1}},
		{"stage, a pinned miss", func() error { st, err = d.Stage(4 * n); return err }, Counts{HostAllocs: 1}},
		{"upload staged", func() error { return d.UploadStaged(a, st) }, Counts{H2DCalls: 1, H2DBytes: 4 * n, PinnedCopies: 1, PinnedBytes: 4 * n}},
		{"download staged", func() error { return d.DownloadStaged(st, a) }, Counts{D2HCalls: 1, D2HBytes: 4 * n, PinnedCopies: 1, PinnedBytes: 4 * n}},
		{"sync", d.Sync, Counts{Syncs: 1}},
		{"unstage, restage: a pinned hit", func() error { d.Unstage(st); st, err = d.Stage(4 * n); return err }, Counts{}},
		{"sgemm", func() error { return d.Sgemm(GemmArgs{M: 10, N: 10, K: 1, Alpha: 1, A: a, B: b, C: c}) }, Counts{GEMMs: 1}},
		{"batched sgemm", func() error {
			return d.SgemmBatched(GemmArgs{M: 5, N: 5, K: 1, Alpha: 1, A: a, B: b, C: c}, 5, 5, 25, 4)
		}, Counts{GEMMs: 1}},
		{"tf32 gemm", func() error { return d.GemmTF32(GemmArgs{M: 10, N: 10, K: 1, Alpha: 1, A: a, B: b, C: c}) }, Counts{GEMMs: 1}},
		{"batched tf32", func() error {
			return d.GemmTF32Batched(GemmArgs{M: 5, N: 5, K: 1, Alpha: 1, A: a, B: b, C: c}, 5, 5, 25, 4)
		}, Counts{GEMMs: 1}},
		{"bf16 gemm: two conversions in pooled memory", func() error {
			return d.GemmRounded(GemmArgs{M: 10, N: 10, K: 1, Alpha: 1, A: a, B: b, C: c}, BF16)
		}, Counts{Allocs: 2, Launches: 2, GEMMs: 1}},
		{"bf16 gemm again: the pool serves both", func() error {
			return d.GemmRounded(GemmArgs{M: 10, N: 10, K: 1, Alpha: 1, A: a, B: b, C: c}, BF16)
		}, Counts{PoolHits: 2, Launches: 2, GEMMs: 1}},
		{"no bad index: a download", func() error { _, err = d.BadIndex(); return err },
			Counts{D2HCalls: 1, D2HBytes: 4, PageableCopies: 1, PageableBytes: 4, Syncs: 1}},
		{"a bad index: a download and the flag's clear", func() error {
			if err := d.Launch("gp_fill", 1, d.BadFlag(), float32(1), 1); err != nil {
				return err
			}
			_, err = d.BadIndex()
			return err
		}, Counts{Launches: 1, D2HCalls: 1, D2HBytes: 4, PageableCopies: 1, PageableBytes: 4, Syncs: 1, Memsets: 1, MemsetBytes: 4}},
		{"trim: the cached blocks go back to the driver", func() error {
			if err := d.Free(a); err != nil {
				return err
			}
			return d.mem.Trim()
		}, Counts{Frees: 3}}, // a, and the two 16-bit copies
		{"refused: a copy past the end", func() error {
			if d.Copy(b, c, n+1) == nil {
				t.Error("a copy past the end was accepted")
			}
			return nil
		}, Counts{}},
		{"refused: a gemm on too small a buffer", func() error {
			if d.Sgemm(GemmArgs{M: 11, N: 10, K: 1, Alpha: 1, A: b, B: b, C: c}) == nil {
				t.Error("a gemm past the end was accepted")
			}
			return nil
		}, Counts{}},
		{"refused: a launch with an argument it cannot pass", func() error {
			if d.Launch("gp_fill", n, b, "one", n) == nil {
				t.Error("a string argument was accepted")
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
}

// TestCountsFields: Sub covers every counter, and each has a snake_case
// JSON key of its own.
func TestCountsFields(t *testing.T) {
	var c Counts
	if got, want := len(c.fields()), reflect.TypeOf(c).NumField(); got != want {
		t.Fatalf("fields lists %d counters of %d", got, want)
	}
	for i, f := range c.fields() {
		*f = int64(10 + i)
	}
	var one Counts
	for _, f := range one.fields() {
		*f = 1
	}
	diff := c.Sub(one)
	for i, f := range diff.fields() {
		if *f != int64(9+i) {
			t.Errorf("counter %d: %d − 1 is %d", i, 10+i, *f)
		}
	}
	raw, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]int64
	if err := json.Unmarshal(raw, &keys); err != nil {
		t.Fatal(err)
	}
	if len(keys) != len(c.fields()) {
		t.Errorf("%d JSON keys for %d counters: %s", len(keys), len(c.fields()), raw)
	}
	snake := regexp.MustCompile(`^[a-z0-9]+(_[a-z0-9]+)*$`)
	for k := range keys {
		if !snake.MatchString(k) {
			t.Errorf("key %q is not snake_case", k)
		}
	}
	for _, k := range []string{"syncs", "h2d_bytes", "d2h_bytes", "h2d_calls", "d2h_calls", "pageable_copies", "launches", "gemms", "memsets", "allocs"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("no key %q", k)
		}
	}
}
