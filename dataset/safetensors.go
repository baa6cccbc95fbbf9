package dataset

import (
	"github.com/graphpipe/graphpipe/tensor"
)

// safetensorsDTypes maps the dtypes read to ours.
var safetensorsDTypes = map[string]DType{"F32": Float32, "I32": Int32, "I64": Int64}

// addSafetensors maps a safetensors file and adds its tensors.
func (s *Set) addSafetensors(path string) error {
	m, err := mapFile(path)
	if err != nil {
		return err
	}
	s.files = append(s.files, m)
	return s.addSafetensorsBytes(m)
}

func (s *Set) addSafetensorsBytes(m *mapping) error {
	h, err := tensor.ReadSafetensorsHeaderSized(m.data, m.size)
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
