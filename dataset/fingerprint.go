package dataset

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// fingerprintBlocks and fingerprintBlock: how much of each file the
// fingerprint reads besides its first block: that many blocks spread evenly,
// the last ending at the file's end.
const (
	fingerprintBlocks = 32
	fingerprintBlock  = 4096
	fingerprintHead   = 64 << 10
)

// Fingerprint is a SHA-256, in hex, of every file's size, its first 64 KiB
// (the headers) and 32 blocks of 4 KiB spread evenly over it, files in the
// order Open took them. Two hosts holding the same files get the same
// fingerprint whatever their paths; files that differ in size, header or a
// sampled block get different ones.
func (s *Set) Fingerprint() string {
	h := sha256.New()
	for _, m := range s.files {
		var size [8]byte
		binary.LittleEndian.PutUint64(size[:], uint64(m.size))
		h.Write(size[:])
		h.Write(m.data[:min(int64(fingerprintHead), m.size)])
		for i := int64(0); i < fingerprintBlocks && m.size > fingerprintBlock; i++ {
			at := (m.size - fingerprintBlock) * i / (fingerprintBlocks - 1)
			h.Write(m.data[at : at+fingerprintBlock])
		}
		m.used(fingerprintHead + fingerprintBlocks*fingerprintBlock)
	}
	return hex.EncodeToString(h.Sum(nil))
}
