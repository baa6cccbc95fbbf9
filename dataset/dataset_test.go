package dataset

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor"
)

// testModel reads x [3] float32, ids [2] int32 in [0, 7) and label in [0, 4).
const testModel = `{"format": "graphpipe/model@1", "name": "t", "batch_size": 2, "seed": 1,
 "inputs": [{"name": "x", "shape": [3], "dtype": "float32"},
            {"name": "ids", "shape": [2], "dtype": "int32", "range": [0, 7]},
            {"name": "label", "shape": [], "dtype": "int32", "range": [0, 4]}],
 "ops": [{"name": "emb", "op": "embedding", "inputs": ["ids"], "attrs": {"num": 7, "dim": 3}},
         {"name": "pool", "op": "mean", "inputs": ["emb"], "attrs": {"axis": 0}},
         {"name": "cat", "op": "concat", "inputs": ["x", "pool"]},
         {"name": "head", "op": "linear", "inputs": ["cat"], "attrs": {"out": 4}},
         {"name": "loss", "op": "softmax_cross_entropy", "inputs": ["head", "label"]}]}`

func graph(t *testing.T) *dag.Graph {
	t.Helper()
	g, err := dag.Load([]byte(testModel))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// The values gen_numpy.py writes for sample i.
func wantX(i int) []float32 {
	return []float32{float32(i), float32(float64(i) + 0.1), float32(float64(i) + 0.2)}
}
func wantIDs(i int) []int32 { return []int32{int32(3 * i % 7), int32((3*i + 1) % 7)} }
func wantLabel(i int) int32 { return int32(i % 4) }

// writeShards writes the same samples as gen_numpy.py as safetensors
// shards of the given sizes (ids as int64 bytes would need I64: written as
// I32 here), and returns the directory.
func writeShards(t *testing.T, sizes ...int) string {
	t.Helper()
	dir := t.TempDir()
	at := 0
	for k, n := range sizes {
		var x []float32
		var ids, label []int32
		for i := at; i < at+n; i++ {
			x = append(x, wantX(i)...)
			ids = append(ids, wantIDs(i)...)
			label = append(label, wantLabel(i))
		}
		b, err := tensor.EncodeSafetensors([]tensor.Named{{Name: "x", Shape: []int{n, 3}, F32: x},
			{Name: "ids", Shape: []int{n, 2}, I32: ids}, {Name: "label", Shape: []int{n}, I32: label}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "part-"+string(rune('a'+k))+".safetensors"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		at += n
	}
	return dir
}

// TestOpenFormats: every format holds the same five samples, read back in
// any order across shard boundaries, from a mapping and by position.
func TestOpenFormats(t *testing.T) {
	t.Run("mapped", func(t *testing.T) { openFormats(t, true) })
	old := mapLimit
	mapLimit = 0 // nothing is mapped
	defer func() { mapLimit = old }()
	t.Run("read by position", func(t *testing.T) { openFormats(t, false) })
}

func openFormats(t *testing.T, mapped bool) {
	shards := writeShards(t, 2, 1, 2)
	single := writeShards(t, 5)
	for _, tc := range []struct{ name, path string }{
		{"safetensors shards", shards},
		{"one safetensors file", filepath.Join(single, "part-a.safetensors")},
		{"npy directory", "testdata/numpy/dir"},
		{"npz", "testdata/numpy/data.npz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for _, f := range s.files {
				if (f.data != nil) != mapped {
					t.Fatalf("%s: mapped %v, want %v", f.path, f.data != nil, mapped)
				}
			}
			if err := s.Check(graph(t)); err != nil {
				t.Fatal(err)
			}
			if s.N != 5 {
				t.Fatalf("%d samples, want 5", s.N)
			}
			rows := []int{4, 0, 2, 3, 1, 2}
			got, err := s.Read(nil, rows)
			if err != nil {
				t.Fatal(err)
			}
			var x []float32
			var ids, label []int32
			for _, i := range rows {
				x, ids, label = append(x, wantX(i)...), append(ids, wantIDs(i)...), append(label, wantLabel(i))
			}
			if !reflect.DeepEqual(got["x"].F32, x) || !reflect.DeepEqual(got["x"].Shape, []int{6, 3}) {
				t.Errorf("x: got %v %v, want %v", got["x"].Shape, got["x"].F32, x)
			}
			if !reflect.DeepEqual(got["ids"].I32, ids) || !reflect.DeepEqual(got["label"].I32, label) {
				t.Errorf("ids, label: got %v %v, want %v %v", got["ids"].I32, got["label"].I32, ids, label)
			}
			only, err := s.Read(map[string]bool{"label": true}, []int{1})
			if err != nil || len(only) != 1 || only["label"].I32[0] != wantLabel(1) {
				t.Errorf("reading label alone: %v, %v", only, err)
			}
		})
	}
}

// TestOpenRefusals: each file a user might hand over by mistake is one
// error naming the file and, where there is one, the tensor.
func TestOpenRefusals(t *testing.T) {
	mixed := writeShards(t, 2)
	copyFile(t, "testdata/numpy/dir/x.npy", filepath.Join(mixed, "x.npy"))
	missing := writeShards(t, 2, 2)
	b, _ := tensor.EncodeSafetensors([]tensor.Named{{Name: "x", Shape: []int{1, 3}, F32: make([]float32, 3)}}, nil)
	os.WriteFile(filepath.Join(missing, "part-c.safetensors"), b, 0o644)
	f16 := filepath.Join(t.TempDir(), "h.safetensors")
	os.WriteFile(f16, header(`{"x":{"dtype":"F16","shape":[1,3],"data_offsets":[0,6]}}`, 6), 0o644)
	empty := t.TempDir()
	fifos := t.TempDir()
	for _, name := range []string{"data.safetensors", "data.npz", "data.npy"} {
		if err := syscall.Mkfifo(filepath.Join(fifos, name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fifoInDir := writeShards(t, 2)
	syscall.Mkfifo(filepath.Join(fifoInDir, "part-z.safetensors"), 0o644)
	overlap := filepath.Join(t.TempDir(), "o.safetensors")
	os.WriteFile(overlap, header(`{"x":{"dtype":"F32","shape":[1,3],"data_offsets":[0,12]},"label":{"dtype":"I32","shape":[1],"data_offsets":[8,12]}}`, 12), 0o644)
	for _, tc := range []struct{ name, path, want string }{
		{"a FIFO", filepath.Join(fifos, "data.safetensors"), "not a regular file (a FIFO)"},
		{"a FIFO .npz", filepath.Join(fifos, "data.npz"), "not a regular file (a FIFO)"},
		{"a FIFO .npy", filepath.Join(fifos, "data.npy"), "not a regular file (a FIFO)"},
		{"a FIFO among the shards", fifoInDir, "not a regular file (a FIFO)"},
		{"/dev/zero", "/dev/zero", "not a regular file (a character device)"},
		{"overlapping tensors", overlap, "overlap"},
		{"no such path", "testdata/none.safetensors", "cannot read"},
		{"unknown extension", "testdata/gen_numpy.py", "not a .safetensors, .npy or .npz"},
		{"compressed npz", "testdata/numpy/compressed.npz", "np.savez_compressed"},
		{"float64", "testdata/numpy/f64.npy", "<f8"},
		{"fortran order", "testdata/numpy/fortran.npy", "Fortran order"},
		{"big endian", "testdata/numpy/bigendian.npy", ">f4"},
		{"mixed directory", mixed, "both .safetensors and .npy"},
		{"empty directory", empty, "no .safetensors or .npy"},
		{"shard without a tensor", missing, `"ids": is in 2 of the 3 shards`},
		{"F16", f16, "is F16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s *Set
			var err error
			done := make(chan struct{})
			go func() { s, err = Open(tc.path); close(done) }()
			select {
			case <-done:
			case <-time.After(time.Second):
				t.Fatal("Open still waits after a second")
			}
			if err == nil {
				s.Close()
				t.Fatalf("opened")
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("got %q, want one line with %q", err, tc.want)
			}
		})
	}
}

func header(h string, data int) []byte {
	b := make([]byte, 8)
	b[0] = byte(len(h))
	return append(append(b, h...), make([]byte, data)...)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCheck: a missing, an extra, a misshapen and a mistyped tensor, and
// counts that disagree, each named on its own line.
func TestCheck(t *testing.T) {
	write := func(t *testing.T, entries ...tensor.Named) string {
		p := filepath.Join(t.TempDir(), "d.safetensors")
		b, err := tensor.EncodeSafetensors(entries, nil)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(p, b, 0o644)
		return p
	}
	x := tensor.Named{Name: "x", Shape: []int{2, 3}, F32: make([]float32, 6)}
	ids := tensor.Named{Name: "ids", Shape: []int{2, 2}, I32: make([]int32, 4)}
	label := tensor.Named{Name: "label", Shape: []int{2}, I32: make([]int32, 2)}
	for _, tc := range []struct {
		name    string
		entries []tensor.Named
		want    []string
	}{
		{"missing", []tensor.Named{x, ids}, []string{`tensor "label": missing`}},
		{"extra", []tensor.Named{x, ids, label, {Name: "y", Shape: []int{2}, F32: make([]float32, 2)}}, []string{`tensor "y": is not an input of model "t"`}},
		{"misshapen", []tensor.Named{{Name: "x", Shape: []int{2, 4}, F32: make([]float32, 8)}, ids, label}, []string{`tensor "x": is [4] per sample`}},
		{"float ids", []tensor.Named{x, {Name: "ids", Shape: []int{2, 2}, F32: make([]float32, 4)}, label}, []string{`tensor "ids": is float32; the model's input is int32`}},
		{"int x", []tensor.Named{{Name: "x", Shape: []int{2, 3}, I32: make([]int32, 6)}, ids, label}, []string{`tensor "x": is int32; the model's input is float32`}},
		{"counts", []tensor.Named{x, ids, {Name: "label", Shape: []int{3}, I32: make([]int32, 3)}}, []string{`tensor "label": has 3 samples, "ids" has 2`}},
		{"two problems", []tensor.Named{x}, []string{`"ids": missing`, `"label": missing`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(write(t, tc.entries...))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			err = s.Check(graph(t))
			if err == nil {
				t.Fatal("passed")
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("got %q, want %d lines", err, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(lines[i], w) || !strings.Contains(lines[i], "d.safetensors") {
					t.Errorf("line %d: got %q, want the file and %q", i, lines[i], w)
				}
			}
		})
	}
}

// TestReadChecksValues: an id outside the embedding, a class outside the
// labels, an int64 past int32 and a NaN are each refused naming the file,
// the tensor and the row; NaN passes with AllowNonfinite.
func TestReadChecksValues(t *testing.T) {
	n := 4
	base := func() (x []float32, ids []int32, label []int32) {
		for i := 0; i < n; i++ {
			x, ids, label = append(x, wantX(i)...), append(ids, wantIDs(i)...), append(label, wantLabel(i))
		}
		return
	}
	for _, tc := range []struct {
		name   string
		poison func(x []float32, ids, label []int32)
		want   string
	}{
		{"id", func(_ []float32, ids, _ []int32) { ids[5] = 7 }, `tensor "ids": row 2: value 1 of the sample, index 7, is outside [0, 7)`},
		{"negative id", func(_ []float32, ids, _ []int32) { ids[0] = -1 }, `tensor "ids": row 0: value 0 of the sample, index -1`},
		{"class", func(_ []float32, _, label []int32) { label[3] = 4 }, `tensor "label": row 3: value 0 of the sample, class 4, is outside [0, 4)`},
		{"NaN", func(x []float32, _, _ []int32) { x[4] = float32(math.NaN()) }, `tensor "x": row 1: value 1 of the sample is NaN`},
		{"Inf", func(x []float32, _, _ []int32) { x[11] = float32(math.Inf(-1)) }, `tensor "x": row 3: value 2 of the sample is -Inf`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x, ids, label := base()
			tc.poison(x, ids, label)
			p := filepath.Join(t.TempDir(), "d.safetensors")
			b, _ := tensor.EncodeSafetensors([]tensor.Named{{Name: "x", Shape: []int{n, 3}, F32: x},
				{Name: "ids", Shape: []int{n, 2}, I32: ids}, {Name: "label", Shape: []int{n}, I32: label}}, nil)
			os.WriteFile(p, b, 0o644)
			s, err := Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.Check(graph(t)); err != nil {
				t.Fatal(err)
			}
			_, err = s.Read(nil, []int{0, 1, 2, 3})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), p) {
				t.Fatalf("got %v, want %s: ...%s", err, p, tc.want)
			}
			if _, err := s.Read(nil, []int{tcCleanRow(tc.name)}); err != nil {
				t.Errorf("a clean row: %v", err)
			}
			if tc.name == "NaN" || tc.name == "Inf" {
				s.AllowNonfinite = true
				if _, err := s.Read(nil, []int{0, 1, 2, 3}); err != nil {
					t.Errorf("with AllowNonfinite: %v", err)
				}
			}
		})
	}
}

// tcCleanRow is a row each poisoning above leaves alone.
func tcCleanRow(name string) int {
	if name == "negative id" {
		return 1
	}
	return 0
}

// TestInt64: int64 ids are converted; one past int32 is refused.
func TestInt64(t *testing.T) {
	s, err := Open("testdata/numpy/data.npz")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Tensors["ids"].DType != Int64 {
		t.Fatalf("ids is %s, want int64 as numpy wrote it", s.Tensors["ids"].DType)
	}
	m := s.Tensors["ids"].parts[0].m
	big, err := m.read(0, m.size)
	if err != nil {
		t.Fatal(err)
	}
	off := s.Tensors["ids"].parts[0].off
	for i := 0; i < 8; i++ {
		big[off+int64(i)] = 0xff
	}
	big[off+7] = 0x7f // 2^63-1
	s.Tensors["ids"].parts[0].m = memSource(m.path, big)
	_, err = s.Read(map[string]bool{"ids": true}, []int{1, 0})
	if err == nil || !strings.Contains(err.Error(), `tensor "ids": row 0: value 0 of the sample, 9223372036854775807, does not fit in int32`) {
		t.Errorf("got %v", err)
	}
}

// TestOrder: each epoch is a permutation of the samples, the same for the
// same seed and epoch and different across both, and steps walk through it
// leaving the last partial batch out.
func TestOrder(t *testing.T) {
	o, err := NewOrder(10, 3, 7, true)
	if err != nil {
		t.Fatal(err)
	}
	if o.StepsPerEpoch() != 3 || o.Left() != 1 {
		t.Fatalf("%d steps per epoch leaving %d, want 3 and 1", o.StepsPerEpoch(), o.Left())
	}
	for epoch := 0; epoch < 4; epoch++ {
		p := Permutation(10, 7, epoch)
		seen := map[int32]bool{}
		for _, v := range p {
			seen[v] = true
		}
		if len(seen) != 10 {
			t.Fatalf("epoch %d: %v is not a permutation", epoch, p)
		}
		var steps []int
		for s := 0; s < 3; s++ {
			steps = append(steps, o.Rows(3*epoch+s)...)
		}
		for i, v := range steps {
			if int32(v) != p[i] {
				t.Fatalf("epoch %d: steps read %v, the permutation is %v", epoch, steps, p)
			}
		}
	}
	if reflect.DeepEqual(Permutation(10, 7, 0), Permutation(10, 7, 1)) || reflect.DeepEqual(Permutation(10, 7, 0), Permutation(10, 8, 0)) {
		t.Error("the same order for another epoch or seed")
	}
	if !reflect.DeepEqual(Permutation(1000, 3, 2), Permutation(1000, 3, 2)) {
		t.Error("not reproducible")
	}
	plain, _ := NewOrder(10, 3, 7, false)
	if got := plain.Rows(4); !reflect.DeepEqual(got, []int{3, 4, 5}) {
		t.Errorf("unshuffled step 4: %v, want [3 4 5]", got)
	}
	if _, err := NewOrder(2, 3, 0, true); err == nil {
		t.Error("2 samples made a batch of 3")
	}
	// Fisher–Yates draws every order of 3 samples about equally often
	counts := map[[3]int32]int{}
	for seed := int64(0); seed < 6000; seed++ {
		p := Permutation(3, seed, 0)
		counts[[3]int32{p[0], p[1], p[2]}]++
	}
	for k, c := range counts {
		if len(counts) != 6 || c < 850 || c > 1150 {
			t.Fatalf("order %v drawn %d times of 6000 (%d orders seen)", k, c, len(counts))
		}
	}
}

func TestEvalRows(t *testing.T) {
	if EvalBatches(10, 4) != 3 || !reflect.DeepEqual(EvalRows(10, 4, 2), []int{8, 9}) || !reflect.DeepEqual(EvalRows(10, 4, 0), []int{0, 1, 2, 3}) {
		t.Errorf("eval batches of 10 by 4: %d, %v", EvalBatches(10, 4), EvalRows(10, 4, 2))
	}
}

// TestFingerprint: copies anywhere agree; a changed byte in a sampled block
// or a changed size does not.
func TestFingerprint(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		e, _ := tensor.EncodeSafetensors([]tensor.Named{{Name: "x", Shape: []int{len(b) / 4}, F32: floats(b)}}, nil)
		os.WriteFile(p, e, 0o644)
		return p
	}
	fp := func(p string) string {
		s, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		f, err := s.Fingerprint()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	a := fp(write("a.safetensors", data))
	if b := fp(write("b.safetensors", data)); a != b {
		t.Error("two copies differ")
	}
	changed := append([]byte(nil), data...)
	changed[len(changed)-8] ^= 1 // inside the last block
	if fp(write("c.safetensors", changed)) == a {
		t.Error("a changed last block went unseen")
	}
	if fp(write("d.safetensors", data[:len(data)-12])) == a {
		t.Error("a shorter file went unseen")
	}
}

func floats(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = float32(b[4*i])
	}
	return out
}
