package cuda

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// emuLibName is the emulator library's file name in its cache directory;
// emuSumName its sidecar, the library's SHA-256 and size, written beside
// it before the directory is renamed into place (so the two appear
// together).
const (
	emuLibName = "libgraphpipe-cuda-emulator.so"
	emuSumName = emuLibName + ".sha256"
)

// EmulatorLibrary returns the emulator library for this kernels.cu,
// building it into the user cache directory on first use (keyed by the
// source, so an edited kernels.cu builds anew). A cached library is
// verified against its sidecar before it is handed out: a truncated or
// damaged one (dlopen maps it, and the first call past its end dies with
// SIGBUS), or one without a sidecar, is rebuilt. Processes that race to
// build it each build into their own directory; the first rename wins.
func EmulatorLibrary() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return cachedEmulator(base, BuildEmulator)
}

// cachedEmulator is EmulatorLibrary under base, building with build.
func cachedEmulator(base string, build func(dir string) (string, error)) (string, error) {
	sum := sha256.Sum256([]byte(emuShim + kernelSource + emuRuntime + strings.Join(emuFlags, " ")))
	dir := filepath.Join(base, "graphpipe", "cuda-emulator-"+hex.EncodeToString(sum[:8]))
	lib := filepath.Join(dir, emuLibName)
	if verifyEmulator(lib) == nil {
		return lib, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "build-")
	if err != nil {
		return "", err
	}
	built, err := build(tmp)
	if err == nil {
		err = writeEmulatorSum(built)
	}
	if err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	setAside(dir)
	// A directory renamed into place, not a file (internal/atomicfile's
	// case): rename(2) of a directory replaces an empty directory only and
	// fails (ENOTDIR) on anything that is not one, a device or a FIFO
	// included; the loser of a race to build keeps the winner's.
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		if verr := verifyEmulator(lib); verr != nil {
			return "", fmt.Errorf("cuda: emulator: cache %s: %v (and %v)", dir, err, verr)
		}
	}
	return lib, nil
}

// setAside moves a cache directory that failed its check out of the way
// and removes it: a process that has the old library mapped keeps its
// copy (the file is unlinked, not rewritten); one that races here finds
// it gone.
func setAside(dir string) {
	if _, err := os.Lstat(dir); err != nil {
		return
	}
	suffix := make([]byte, 4)
	rand.Read(suffix)
	bad := dir + ".bad-" + hex.EncodeToString(suffix)
	if os.Rename(dir, bad) == nil {
		os.RemoveAll(bad)
	}
}

// writeEmulatorSum writes lib's sidecar: its SHA-256 and size.
func writeEmulatorSum(lib string) error {
	sum, n, err := hashFile(lib)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(filepath.Dir(lib), emuSumName), []byte(fmt.Sprintf("%s %d\n", sum, n)), 0o644)
}

// verifyEmulator checks a cached library against its sidecar: a regular
// file of the size and SHA-256 recorded when it was built.
func verifyEmulator(lib string) error {
	side, err := os.ReadFile(filepath.Join(filepath.Dir(lib), emuSumName))
	if err != nil {
		return fmt.Errorf("no checksum beside it: %w", err)
	}
	f := strings.Fields(string(side))
	if len(f) != 2 || len(f[0]) != 64 {
		return fmt.Errorf("its checksum file is damaged")
	}
	size, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return fmt.Errorf("its checksum file is damaged")
	}
	st, err := os.Stat(lib)
	switch {
	case err != nil:
		return err
	case !st.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file", lib)
	case st.Size() != size:
		return fmt.Errorf("%s: %d bytes, built as %d (truncated or damaged)", lib, st.Size(), size)
	}
	sum, _, err := hashFile(lib)
	if err != nil {
		return err
	}
	if sum != f[0] {
		return fmt.Errorf("%s: checksum does not match its build's (damaged)", lib)
	}
	return nil
}

// hashFile is the SHA-256 of a regular file and its size.
func hashFile(path string) (string, int64, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer fh.Close()
	if st, err := fh.Stat(); err != nil || !st.Mode().IsRegular() {
		return "", 0, fmt.Errorf("%s is not a regular file", path)
	}
	h := sha256.New()
	n, err := io.Copy(h, fh)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
