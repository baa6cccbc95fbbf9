package onnx

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/onnx/onnxpb"
)

// externalModel is a linear layer whose weight (3×4 float32, 48 bytes) is
// external data at location.
func externalModel(location string) *onnxpb.ModelProto {
	w := &onnxpb.TensorProto{Name: proto.String("fc.weight"), Dims: []int64{4, 3}, DataType: proto.Int32(int32(tFloat)),
		DataLocation: onnxpb.TensorProto_EXTERNAL.Enum(),
		ExternalData: []*onnxpb.StringStringEntryProto{{Key: proto.String("location"), Value: proto.String(location)}}}
	return model([]*onnxpb.ValueInfoProto{tensorInput("x", tFloat, "batch", 4)}, []*onnxpb.TensorProto{w},
		[]*onnxpb.NodeProto{nodeOf("MatMul", "fc", []string{"x", "fc.weight"}, []string{"y"})}, "y")
}

// TestExternalDataStaysInside: external data is read from a regular file
// inside the model's directory, through symbolic links that stay inside
// it; a link that leads out (to a file, to a directory), a FIFO, a device
// and a directory are refused at once, naming the location, before any
// weight is read.
func TestExternalDataStaysInside(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.bin")
	os.WriteFile(secret, make([]byte, 48), 0o644)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "w.bin"), make([]byte, 48), 0o644)
	os.Symlink("w.bin", filepath.Join(dir, "inside.bin"))
	os.Symlink(secret, filepath.Join(dir, "escape.bin"))
	os.Symlink(outside, filepath.Join(dir, "linkdir"))
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	syscall.Mkfifo(filepath.Join(dir, "fifo.bin"), 0o644)
	os.Symlink("/dev/zero", filepath.Join(dir, "zero.bin"))
	for _, tc := range []struct {
		location, want string
	}{
		{"w.bin", ""},
		{"inside.bin", ""},
		{"escape.bin", `external data location "escape.bin" leads out of the model's directory`},
		{"linkdir/secret.bin", `external data location "linkdir/secret.bin" leads out of the model's directory`},
		{"fifo.bin", `external data location "fifo.bin": not a regular file (a FIFO)`},
		{"zero.bin", `leads out of the model's directory`},
		{"sub", `external data location "sub": not a regular file (a directory)`},
		{"../secret.bin", `is not inside the model's directory`},
	} {
		t.Run(tc.location, func(t *testing.T) {
			var err error
			done := make(chan struct{})
			go func() {
				defer close(done)
				var f *File
				if f, err = Read(marshal(externalModel(tc.location)), dir, filepath.Join(dir, "m.onnx")); err == nil {
					_, err = Import(f, Options{Loss: dag.MSE})
				}
			}()
			select {
			case <-done:
			case <-time.After(time.Second):
				t.Fatal("still reading after a second")
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n")):
				t.Fatalf("got %v, want one line with %q", err, tc.want)
			case strings.HasPrefix(tc.location, "escape") && !strings.Contains(err.Error(), secret):
				t.Fatalf("%v: does not say where the link leads", err)
			}
		})
	}
}

// TestReadFileRefusesWhatIsNotAFile: the model file itself must be a
// regular file: a FIFO or a directory is refused at once.
func TestReadFileRefusesWhatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "m.onnx")
	syscall.Mkfifo(fifo, 0o644)
	for _, path := range []string{fifo, dir, "/dev/zero"} {
		done := make(chan error, 1)
		go func() { _, err := ReadFile(path); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("%s: %v", path, err)
			}
		case <-time.After(time.Second):
			t.Fatalf("%s: still reading after a second", path)
		}
	}
}
