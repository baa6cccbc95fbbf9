package onnx

import (
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/graphpipe/graphpipe/internal/regular"
	"github.com/graphpipe/graphpipe/onnx/onnxpb"
)

// The versions the importer reads: ONNX IR 6 (ONNX 1.6) and later, and the
// default domain's opsets 11 to 18 (PyTorch 1.13 exports 14 by default;
// where an op changed between them, the handler reads both forms or
// refuses the older meaning, as Softmax's before 13).
const (
	MinIR    = 6
	MinOpset = 11
	MaxOpset = 18
)

// maxFile bounds a model file: protobuf's own limit is 2 GiB; larger models
// keep their weights in external data files.
const maxFile = 2 << 30

// File is a read and checked ONNX model.
type File struct {
	Path  string // for messages
	Dir   string // where external data files are
	Model *onnxpb.ModelProto
	Opset int64 // the default domain's
	inits map[string]*stored
}

// ReadFile reads and checks an ONNX model file.
func ReadFile(path string) (*File, error) {
	f, err := regular.Open(path) // a FIFO's open would wait for ever
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > maxFile {
		return nil, fileErrf("", "%d bytes is past protobuf's 2 GiB limit; keep the weights in external data files", fi.Size())
	}
	// The file's bytes and the tensors protobuf copies out of them are the
	// import's peak: collect more eagerly meanwhile, and let the bytes go.
	defer debug.SetGCPercent(debug.SetGCPercent(20))
	data := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, err
	}
	file, err := Read(data, filepath.Dir(path), path)
	data = nil
	runtime.GC()
	return file, err
}

// Read parses and checks a model's bytes; dir is where its external data
// files are, path names it in messages.
func Read(data []byte, dir, path string) (*File, error) {
	if len(data) == 0 {
		return nil, fileErrf("", "the file is empty, not an ONNX model")
	}
	m := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(data, m); err != nil {
		return nil, fileErrf("", "not an ONNX model: %s", strings.TrimPrefix(err.Error(), "proto: "))
	}
	f := &File{Path: path, Dir: dir, Model: m}
	if err := f.check(); err != nil {
		return nil, err
	}
	return f, nil
}

// check checks the versions, the graph's shape and every initializer.
func (f *File) check() error {
	m := f.Model
	if m.Graph == nil {
		return fileErrf("graph", "missing: not an ONNX model")
	}
	if v := m.GetIrVersion(); v < MinIR {
		return fileErrf("ir_version", "is %d; graphpipe reads IR %d (ONNX 1.6) and later: re-export with a newer exporter", v, MinIR)
	}
	f.Opset = -1
	for _, o := range m.GetOpsetImport() {
		if o.GetDomain() == "" || o.GetDomain() == "ai.onnx" {
			f.Opset = o.GetVersion()
		}
	}
	switch {
	case f.Opset < 0:
		return fileErrf("opset_import", "imports no default-domain opset")
	case f.Opset < MinOpset || f.Opset > MaxOpset:
		return fileErrf("opset_import", "the default domain's opset is %d; graphpipe reads %d to %d (export with opset_version=17)", f.Opset, MinOpset, MaxOpset)
	}
	g := m.Graph
	if len(g.GetOutput()) == 0 {
		return fileErrf("graph.output", "the graph has no outputs")
	}
	f.inits = map[string]*stored{}
	var errs Errors
	for _, t := range g.GetInitializer() {
		field := fmt.Sprintf("graph.initializer[%q]", t.GetName())
		if t.GetName() == "" {
			errs = append(errs, fileErrf("graph.initializer", "an initializer has no name"))
			continue
		}
		if _, dup := f.inits[t.GetName()]; dup {
			errs = append(errs, fileErrf(field, "is defined twice"))
			continue
		}
		s, err := checkTensor(t, f.Dir)
		if err != nil {
			errs = append(errs, fileErrf(field, "%v", err))
			continue
		}
		f.inits[t.GetName()] = s
	}
	if len(g.GetSparseInitializer()) > 0 {
		errs = append(errs, fileErrf("graph.sparse_initializer", "sparse initializers are not supported"))
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// Unwrap lets errors.As find a single problem inside Errors.
func (es Errors) Unwrap() []error { return es }
