package dataset

import (
	"encoding/binary"

	"github.com/graphpipe/graphpipe/tensor"
)

// maxHeader bounds a safetensors header, as package tensor does.
const maxHeader = 100 << 20

// safetensorsDTypes maps the dtypes read to ours.
var safetensorsDTypes = map[string]DType{"F32": Float32, "I32": Int32, "I64": Int64}

// addSafetensors maps a safetensors file and adds its tensors.
func (s *Set) addSafetensors(path string) error {
	m, err := openFile(path)
	if err != nil {
		return err
	}
	s.files = append(s.files, m)
	return s.addSafetensorsBytes(m)
}

func (s *Set) addSafetensorsBytes(m *source) error {
	var n [8]byte
	if m.size >= 8 {
		if err := m.readInto(n[:], 0); err != nil {
			return errorf(m.path, "", -1, "%v", err)
		}
	}
	head := n[:min(m.size, 8)]
	if l := binary.LittleEndian.Uint64(n[:]); m.size >= 8 && l <= maxHeader && l <= uint64(m.size-8) {
		var err error
		if head, err = m.read(0, int64(8+l)); err != nil {
			return errorf(m.path, "", -1, "%v", err)
		}
	}
	h, err := tensor.ReadSafetensorsHeaderSized(head, m.size)
	if err != nil {
		return errorf(m.path, "", -1, "%v", err)
	}
	for _, e := range h.Entries {
		dt, ok := safetensorsDTypes[e.DType]
		if !ok {
			return errorf(m.path, e.Name, -1, "is %s; graphpipe reads F32, I32 and I64 (convert it before saving)", e.DType)
		}
		if err := s.add(m, e.Name, dt, e.Shape, e.Start); err != nil {
			return err
		}
	}
	return nil
}
