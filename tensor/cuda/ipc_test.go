package cuda

import (
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// TestDriverIPCHandleLayout: the handle passed by value to
// cuIpcOpenMemHandle is CUipcMemHandle's 64 bytes.
func TestDriverIPCHandleLayout(t *testing.T) {
	if n := unsafe.Sizeof(ipcMemHandle{}); n != 64 || unsafe.Sizeof(IPCHandle{}) != 64 {
		t.Fatalf("CUipcMemHandle is 64 bytes, ipcMemHandle %d", n)
	}
}

func ipcValues(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i)*0.5 - 3
	}
	return v
}

// TestEmulatorIPCInProcess: a buffer exported by one emulated device is
// copied by another from the shared arena, at its offset; the arena is
// opened once, exported once.
func TestEmulatorIPCInProcess(t *testing.T) {
	src, dst := emulator(t), emulator(t)
	want := ipcValues(1000)
	b, err := src.Upload(want)
	if err != nil {
		t.Fatal(err)
	}
	for round, view := range []Buffer{b, b.Offset(7)} {
		h, off, err := src.Export(view)
		if err != nil {
			t.Fatal(err)
		}
		n := view.N
		into, err := dst.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := dst.CopyFromPeer(into, h, off, n); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, n)
		if err := dst.Download(got, into); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if got[i] != want[b.N-n+i] {
				t.Fatalf("round %d: element %d is %v, want %v", round, i, got[i], want[b.N-n+i])
			}
		}
	}
	if c := src.Counts(); c.IPCExports != 1 {
		t.Errorf("exported %d times, want once", c.IPCExports)
	}
	if c := dst.Counts(); c.IPCOpens != 1 || c.PeerCopies != 2 || c.PeerBytes != 4*(1000+993) {
		t.Errorf("opens %d, copies %d of %d bytes: want 1, 2, %d", c.IPCOpens, c.PeerCopies, c.PeerBytes, 4*(1000+993))
	}
}

// TestEmulatorIPCRefusals: a handle that names no emulator's memory, and
// one whose device is closed, are refused by name; a copy longer than its
// buffer too.
func TestEmulatorIPCRefusals(t *testing.T) {
	src, dst := emulator(t), emulator(t)
	b, _ := src.Upload(ipcValues(8))
	h, off, err := src.Export(b)
	if err != nil {
		t.Fatal(err)
	}
	into, _ := dst.Alloc(8)
	if err := dst.CopyFromPeer(into, h, off, 9); err == nil || !strings.Contains(err.Error(), "9 elements into a buffer of 8") {
		t.Errorf("an overlong copy: %v", err)
	}
	var junk IPCHandle
	if err := dst.CopyFromPeer(into, junk, 0, 8); err == nil || !strings.Contains(err.Error(), "not an emulator's memory handle") {
		t.Errorf("a junk handle: %v", err)
	}
	src.Close()
	if err := dst.CopyFromPeer(into, h, off, 8); err == nil {
		t.Error("copied from a closed device's memory")
	}
}

// ipcChildEnv carries, to the helper process, the emulator library and
// what to copy: handle (hex), offset, elements.
const ipcChildEnv = "GRAPHPIPE_TEST_IPC_CHILD"

// TestEmulatorIPCAcrossProcesses: another process opens the handle and
// copies the buffer from this one's device memory.
func TestEmulatorIPCAcrossProcesses(t *testing.T) {
	if spec := os.Getenv(ipcChildEnv); spec != "" {
		ipcChild(t, spec)
		return
	}
	src := emulator(t)
	want := ipcValues(5000)
	b, _ := src.Upload(want)
	h, off, err := src.Export(b.Offset(100))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestEmulatorIPCAcrossProcesses$", "-test.v")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%s,%d,%d", ipcChildEnv, emuLib, hex.EncodeToString(h[:]), off, 4900))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the other process: %v\n%s", err, out)
	}
	var sum float64
	for _, v := range want[100:] {
		sum += float64(v)
	}
	if !strings.Contains(string(out), fmt.Sprintf("sum %g", sum)) {
		t.Fatalf("the other process did not copy the values (sum %g):\n%s", sum, out)
	}
}

func ipcChild(t *testing.T, spec string) {
	f := strings.Split(spec, ",")
	raw, _ := hex.DecodeString(f[1])
	off, _ := strconv.ParseUint(f[2], 10, 64)
	n, _ := strconv.Atoi(f[3])
	d, err := OpenEmulator(f[0])
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	into, _ := d.Alloc(n)
	if err := d.CopyFromPeer(into, IPCHandle(raw), off, n); err != nil {
		t.Fatal(err)
	}
	printSum(t, d, into, n)
}

// ipcGPUChildEnv carries, to the helper process on a GPU, what to copy:
// handle (hex), offset, elements, rounds.
const ipcGPUChildEnv = "GRAPHPIPE_TEST_IPC_GPU_CHILD"

// TestIPCOnGPU: a process on GPU 0 copies another one's 16.8 MB buffer
// on the same GPU through its IPC handle (the same-host link of two
// workers sharing a GPU), checks the values and says the copy's bandwidth.
// Skipped without a GPU; bench/gpu/run.sh records its figures.
func TestIPCOnGPU(t *testing.T) {
	if spec := os.Getenv(ipcGPUChildEnv); spec != "" {
		ipcGPUChild(t, spec)
		return
	}
	src, err := Open(0)
	if err != nil {
		t.Skipf("no GPU to test on: %v", err)
	}
	defer src.Close()
	bindHere(t, src) // the context is current on this thread only
	const n = 16 * 256 * 1024
	want := ipcValues(n)
	b, err := src.Upload(want)
	if err != nil {
		t.Fatal(err)
	}
	h, off, err := src.Export(b)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestIPCOnGPU$", "-test.v")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d,%d,%d", ipcGPUChildEnv, hex.EncodeToString(h[:]), off, n, 50))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the other process: %v\n%s", err, out)
	}
	var sum float64
	for _, v := range want {
		sum += float64(v)
	}
	if !strings.Contains(string(out), fmt.Sprintf("sum %g", sum)) {
		t.Fatalf("the other process did not copy the values (sum %g):\n%s", sum, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "ipc copy") {
			t.Log(line)
		}
	}
}

func ipcGPUChild(t *testing.T, spec string) {
	f := strings.Split(spec, ",")
	raw, _ := hex.DecodeString(f[0])
	off, _ := strconv.ParseUint(f[1], 10, 64)
	n, _ := strconv.Atoi(f[2])
	rounds, _ := strconv.Atoi(f[3])
	d, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	bindHere(t, d)
	into, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CopyFromPeer(into, IPCHandle(raw), off, n); err != nil { // opens the handle
		t.Fatal(err)
	}
	start := time.Now()
	for i := 0; i < rounds; i++ {
		if err := d.CopyFromPeer(into, IPCHandle(raw), off, n); err != nil {
			t.Fatal(err)
		}
	}
	secs := time.Since(start).Seconds() / float64(rounds)
	printSum(t, d, into, n)
	fmt.Printf("ipc copy of %d bytes from another process on %s: %.4g ms, %.4g GB/s (opens %d)\n", 4*n, d.Name, 1e3*secs, 4*float64(n)/secs/1e9, d.Counts().IPCOpens)
}

// printSum prints the sum of into's n values, which the parent process
// looks for in the child's output.
func printSum(t *testing.T, d *Device, into Buffer, n int) {
	t.Helper()
	got := make([]float32, n)
	if err := d.Download(got, into); err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, v := range got {
		sum += float64(v)
	}
	fmt.Printf("sum %g\n", sum)
}
