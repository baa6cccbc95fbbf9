package wire

import (
	"encoding/binary"
	"math"
)

// The msgpack subset frames and tensor messages use, appended by hand in
// the encoder's own forms (the most compact one for each value, as
// vmihailenco/msgpack writes them): a frame's header costs a few dozen
// byte writes, not an encoder and its buffer per chunk. The bounded reader
// (reader, frame.go) reads them back; frame_test.go checks these against
// the msgpack encoder.

func appendArrayLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
}

func appendUint(b []byte, n uint64) []byte {
	switch {
	case n <= math.MaxInt8:
		return append(b, byte(n))
	case n <= math.MaxUint8:
		return append(b, 0xcc, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(n))
	case n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), n)
}

func appendInt(b []byte, n int64) []byte {
	switch {
	case n >= 0:
		return appendUint(b, uint64(n))
	case n >= -32:
		return append(b, byte(n))
	case n >= math.MinInt8:
		return append(b, 0xd0, byte(n))
	case n >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(n))
	case n >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(n))
}

func appendString(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 256:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

// appendBinLen is a binary field's header for n bytes.
func appendBinLen(b []byte, n int) []byte {
	switch {
	case n < 256:
		return append(b, 0xc4, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xc5), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(n))
}

// appendBin32Len is a binary field's header for n bytes in its 5-byte
// form, whatever n: a header whose length does not depend on n, so that
// the bytes after it can be placed (aligned) before n is written.
func appendBin32Len(b []byte, n int) []byte {
	return binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(n))
}
