package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSynthRefusals: data synth refuses, before writing anything, a file
// larger than its file system's free space (naming the bytes needed and
// free), a size that overflows, and a --skip whose last index overflows
// (it wrote an empty tensor and failed); each exit 2.
func TestSynthRefusals(t *testing.T) {
	model := smallModel(t, "mlp")
	dir := t.TempDir()
	out := filepath.Join(dir, "d.safetensors")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--samples", "1000000000000000"}, "-o " + out + ": 1000000000000000 samples of 2 inputs need up to"},
		{[]string{"--samples", "9000000000000000000"}, `--samples 9000000000000000000: input "x" of [32] takes 128 bytes a sample; 9000000000000000000 samples of it overflow`},
		{[]string{"--samples", "1000", "--skip", "9223372036854775000"}, "--skip 9223372036854775000: with --samples 1000 the last sample would be"},
	} {
		code, _, errs := gp(t, "", append([]string{"data", "synth", model, "-o", out}, tc.args...)...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Fatalf("%v: exit %d\n%s\nwant %q", tc.args, code, errs, tc.want)
		}
		if strings.Contains(tc.want, "need up to") && (!strings.Contains(errs, "bytes), and "+dir+" has ") || !strings.Contains(errs, "free")) {
			t.Fatalf("the free space is not named:\n%s", errs)
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Fatalf("%v left %v", tc.args, left)
		}
	}
}

// TestSynthNpz: -o FILE.npz writes a NumPy archive (np.savez's: stored
// .npy members), which --data reads to the same training as the
// safetensors file of the same samples; it used to hold safetensors bytes
// under the .npz name.
func TestSynthNpz(t *testing.T) {
	model := smallModel(t, "mlp")
	dir := t.TempDir()
	npz, st := filepath.Join(dir, "d.npz"), filepath.Join(dir, "d.safetensors")
	for _, out := range []string{npz, st} {
		if code, _, errs := gp(t, "", "data", "synth", model, "-o", out, "--samples", "300", "--skip", "100"); code != 0 {
			t.Fatal(errs)
		}
	}
	data, _ := os.ReadFile(npz)
	if !bytes.HasPrefix(data, []byte("PK\x03\x04")) || !bytes.Contains(data, []byte("x.npy")) || !bytes.Contains(data, []byte("\x93NUMPY\x01\x00")) ||
		!bytes.Contains(data, []byte("{'descr': '<f4', 'fortran_order': False, 'shape': (300, 32), }")) ||
		!bytes.Contains(data, []byte("{'descr': '<i4', 'fortran_order': False, 'shape': (300,), }")) {
		t.Fatalf("%s is not an .npz archive of .npy members: %q", npz, data[:min(len(data), 200)])
	}
	var losses [2]string
	for i, d := range []string{npz, st} {
		code, out, errs := gp(t, "", "train", model, "--data", d, "--steps", "3", "--json")
		if code != 0 {
			t.Fatalf("train --data %s: %s", d, errs)
		}
		losses[i] = fmt.Sprint(decodeSummary(t, out).Losses)
	}
	if losses[0] != losses[1] {
		t.Fatalf("losses on the .npz %s, on the safetensors %s", losses[0], losses[1])
	}
}

// TestSynthStopsOnSignal: SIGTERM while data synth writes stops it with
// 128+15 and leaves neither the output nor its temporary file (which it
// left behind).
func TestSynthStopsOnSignal(t *testing.T) {
	model := smallModel(t, "mlp")
	dir := t.TempDir()
	out := filepath.Join(dir, "d.safetensors")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := exec.Command(self, "data", "synth", model, "-o", out, "--samples", "20000000")
	var errs bytes.Buffer
	c.Stderr = &errs
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Process.Kill()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if tmp, _ := filepath.Glob(filepath.Join(dir, ".d.safetensors.tmp*")); len(tmp) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no temporary file appeared")
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("data synth did not stop")
	}
	if code := c.ProcessState.ExitCode(); code != 128+15 || !strings.Contains(errs.String(), "data synth: stopped by SIGTERM; "+out+" not written") {
		t.Fatalf("exit %d (%v)\n%s", code, c.ProcessState, errs.String())
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}
