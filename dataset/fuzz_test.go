package dataset

import (
	"os"
	"testing"

	"github.com/graphpipe/graphpipe/tensor"
)

// FuzzOpen: the safetensors, npy and npz readers never panic on any bytes,
// and whatever they accept lies within the file and reads back (or is
// refused with an *Error: an int64 past int32).
func FuzzOpen(f *testing.F) {
	for _, p := range []string{"testdata/numpy/dir/x.npy", "testdata/numpy/dir/ids.npy", "testdata/numpy/data.npz",
		"testdata/numpy/fortran.npy", "testdata/numpy/compressed.npz"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	st, _ := tensor.EncodeSafetensors([]tensor.Named{{Name: "x", Shape: []int{2, 3}, F32: make([]float32, 6)},
		{Name: "ids", Shape: []int{2}, I32: []int32{1, 2}}}, nil)
	f.Add(st)
	f.Fuzz(func(t *testing.T, b []byte) {
		for kind := 0; kind < 3; kind++ {
			s := &Set{Path: "fuzz", Tensors: map[string]*Tensor{}}
			m := &mapping{path: "fuzz", data: b, size: int64(len(b))}
			var err error
			switch kind {
			case 0:
				err = s.addSafetensorsBytes(m)
			case 1:
				err = s.addNpyAt(m, "x", 0, m.size)
			default:
				err = s.addNpzBytes(m)
			}
			if err != nil {
				continue
			}
			for _, tn := range s.Tensors {
				if tn.rowBytes()*int64(tn.N) > int64(len(b)) {
					t.Fatalf("%q: %d samples of %d bytes in a file of %d", tn.Name, tn.N, tn.rowBytes(), len(b))
				}
				var rows []int
				for i := 0; i < min(tn.N, 8); i++ {
					rows = append(rows, tn.N-1-i)
				}
				if _, err := tn.read(rows, true); err != nil {
					if _, ok := err.(*Error); !ok {
						t.Fatalf("%q: %v is not an *Error", tn.Name, err)
					}
				}
			}
		}
	})
}
