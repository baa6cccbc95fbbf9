package supervise

import "github.com/graphpipe/graphpipe/internal/atomicfile"

// WriteFileAtomic writes data to path as one whole, a new file 0666 less
// the umask (as os.Create's and the checkpoints' are): through a temporary
// file beside it, synced and renamed into place; through a device or a
// FIFO, which is never replaced; a link's target, the link kept
// (internal/atomicfile says which targets are refused).
func WriteFileAtomic(path string, data []byte) error {
	return atomicfile.WriteFile(path, data, 0o666)
}
