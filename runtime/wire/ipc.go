package wire

import (
	"fmt"
	"math"
)

// DeviceTensor is a tensor of a same-host message: where its float32 data
// lie on the sender's device (an IPC handle of the allocation holding them,
// and their byte offset in it). The receiver copies them device to device
// and acknowledges; the sender keeps them unchanged until then.
type DeviceTensor struct {
	Name   string
	Shape  []int
	Handle [64]byte
	Offset uint64
}

// deviceMagic opens a message of device tensors: a msgpack array of the
// magic string and the tensors, each [name, shape, handle, offset]. A
// tensor message opens with the array of its tensors instead, so a
// receiver tells the two apart by their first bytes.
const deviceMagic = "graphpipe/ipc@1"

// EncodeDeviceTensors renders ts as a message of device tensors.
func EncodeDeviceTensors(ts []DeviceTensor) ([]byte, error) {
	b := appendArrayLen(nil, 2)
	b = appendString(b, deviceMagic)
	b = appendArrayLen(b, len(ts))
	for _, t := range ts {
		if _, err := checkSpec(TensorSpec{Name: t.Name, Shape: t.Shape, Data: sized(4 * size(t.Shape))}); err != nil {
			return nil, err
		}
		b = appendArrayLen(b, 4)
		b = appendString(b, t.Name)
		b = appendArrayLen(b, len(t.Shape))
		for _, d := range t.Shape {
			b = appendUint(b, uint64(d))
		}
		b = appendBinLen(b, len(t.Handle))
		b = append(b, t.Handle[:]...)
		b = appendUint(b, t.Offset)
	}
	return b, nil
}

// sized is a payload of n bytes that is never read (a shape's check).
type sized int

func (s sized) Len() int                 { return int(s) }
func (s sized) CopyAt([]byte, int) error { return fmt.Errorf("wire: nothing to read") }

func size(shape []int) int {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return -1
		}
		n *= d
	}
	return n
}

// IsDeviceTensors says whether msg is a message of device tensors.
func IsDeviceTensors(msg []byte) bool {
	head := appendString(appendArrayLen(nil, 2), deviceMagic)
	return len(msg) >= len(head) && string(msg[:len(head)]) == string(head)
}

// DecodeDeviceTensors reads a message of device tensors with the bounds
// DecodeTensors keeps.
func DecodeDeviceTensors(msg []byte) ([]DeviceTensor, error) {
	if !IsDeviceTensors(msg) {
		return nil, &FrameError{"not a message of device tensors"}
	}
	r := &reader{b: msg}
	r.arrayLen()
	r.str(len(deviceMagic), "magic")
	n := r.arrayLen()
	var out []DeviceTensor
	for i := 0; i < n && r.err == nil; i++ {
		if m := r.arrayLen(); r.err == nil && m != 4 {
			r.fail("device tensor %d: %d fields, want 4", i, m)
		}
		t := DeviceTensor{Name: r.str(maxTensorName, "tensor name")}
		rank := r.arrayLen()
		if rank > maxTensorRank {
			r.fail("tensor %q: rank %d", t.Name, rank)
		}
		for d := 0; d < rank && r.err == nil; d++ {
			t.Shape = append(t.Shape, int(r.uint(math.MaxInt32, "dim")))
		}
		if h := r.binView("handle"); r.err == nil && len(h) != len(t.Handle) {
			r.fail("tensor %q: a handle of %d bytes, want %d", t.Name, len(h), len(t.Handle))
		} else {
			copy(t.Handle[:], h)
		}
		t.Offset = r.uint(math.MaxInt64, "offset")
		if r.err == nil {
			out = append(out, t)
		}
	}
	if r.err == nil && r.pos != len(msg) {
		r.fail("%d bytes after the device tensors", len(msg)-r.pos)
	}
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}
