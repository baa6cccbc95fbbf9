package supervise

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteFileAtomic writes through a temporary file beside path, synced and
// renamed into place.
func WriteFileAtomic(path string, data []byte) error {
	tmp, err := CreateTemp(path)
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// CreateTemp creates a new temporary file beside path, to be renamed onto
// it. Unlike os.CreateTemp (0600), it is created 0666 less the umask, as
// os.Create and the checkpoints do: what is renamed into place is readable as
// any other file the user writes.
func CreateTemp(path string) (*os.File, error) {
	dir, base := filepath.Dir(path), filepath.Base(path)
	for try := 0; ; try++ {
		var b [6]byte
		rand.Read(b[:])
		f, err := os.OpenFile(filepath.Join(dir, "."+base+".tmp"+hex.EncodeToString(b[:])), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if errors.Is(err, fs.ErrExist) && try < 100 {
			continue
		}
		return f, err
	}
}
