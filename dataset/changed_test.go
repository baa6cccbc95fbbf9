package dataset

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestFileChangedWhileInUse: a data file cut under a run (cp or np.save
// over it) fails the next read with an error naming the file and the
// tensor, marked Changed (the environment's doing, not the data's), from
// a mapping and by position alike; none crashes the process.
func TestFileChangedWhileInUse(t *testing.T) {
	for _, mapped := range []bool{true, false} {
		name := map[bool]string{true: "mapped", false: "by position"}[mapped]
		t.Run(name, func(t *testing.T) {
			if !mapped {
				defer func(old int64) { mapLimit = old }(mapLimit)
				mapLimit = 0
			}
			dir := writeShards(t, 400)
			s, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if (s.files[0].data != nil) != mapped {
				t.Fatalf("mapped: %v, want %v", s.files[0].data != nil, mapped)
			}
			if _, err := s.Read(nil, []int{399}); err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(dir, "part-a.safetensors")
			if err := os.Truncate(file, 100); err != nil {
				t.Fatal(err)
			}
			_, err = s.Read(map[string]bool{"x": true}, []int{399})
			var de *Error
			if !errors.As(err, &de) || !de.Changed || de.Path != file || de.Tensor != "x" || !strings.Contains(err.Error(), "changed while in use") {
				t.Fatalf("got %v, want a changed file naming %s and tensor x", err, file)
			}
		})
	}
}

// TestMappedFaultIsAnError: reading a mapping past the end of the file
// under it (SIGBUS) is an error, not a crash.
func TestMappedFaultIsAnError(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, make([]byte, 1<<16), 0o644)
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := syscall.Mmap(int(f.Fd()), 0, 1<<16, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(data)
	os.Truncate(file, 0)
	err = copyMapped(make([]byte, 1<<15), data[1<<15:])
	var ce *ChangedError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "a fault reading its mapping") {
		t.Fatalf("got %v, want a fault turned into an error", err)
	}
}
