package plan

import (
	"os"
	"path/filepath"
	"runtime/metrics"
	"testing"
)

// addFiles adds every file matching pattern to f's seed corpus: real files,
// as people write them.
func addFiles(f *testing.F, pattern string) {
	files, _ := filepath.Glob(pattern)
	if len(files) == 0 {
		f.Fatalf("no seed files match %s", pattern)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

// allocated is the bytes run allocates on the heap, as the runtime's
// metrics count them (by span for small objects: to within some KiB),
// without stopping the world as ReadMemStats does.
func allocated(run func()) uint64 {
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(sample)
	before := sample[0].Value.Uint64()
	run()
	metrics.Read(sample)
	return sample[0].Value.Uint64() - before
}

// TestAllocated: allocated sees an allocation a reader might wrongly make.
func TestAllocated(t *testing.T) {
	var keep []byte
	if n := allocated(func() { keep = make([]byte, 10<<20) }); n < 10<<20 || n > 11<<20 {
		t.Fatalf("10 MiB allocated, %d counted", n)
	}
	var many [][]byte
	if n := allocated(func() {
		for i := 0; i < 1<<16; i++ {
			many = append(many, make([]byte, 32))
		}
	}); n < 2<<20 {
		t.Fatalf("65536 allocations of 32 bytes, %d counted", n)
	}
	_, _ = keep, many
}

// decodeBudget is the most a reader may allocate for n bytes of input:
// a reader's fixed cost and a bounded multiple of what it reads, never an
// amount an input merely declares.
func decodeBudget(n int) uint64 { return 1<<20 + 512*uint64(n) }
