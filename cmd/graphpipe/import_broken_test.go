package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBrokenONNX imports every file of onnx/testdata/broken (written by
// onnx/testdata/torch/broken.py, described in its MANIFEST.json): each
// exits 2 with lines that start with the file's path, the first naming what
// the manifest says (the node or field at fault), and writes nothing; the
// valid controls they were made from import.
func TestBrokenONNX(t *testing.T) {
	dir := "../../onnx/testdata/broken"
	data, err := os.ReadFile(filepath.Join(dir, "MANIFEST.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Controls []struct{ File, Loss string }
		Cases    []struct {
			File   string
			Broken string
			Expect []string
		}
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Cases) < 30 {
		t.Fatalf("only %d broken files", len(m.Cases))
	}
	out := filepath.Join(t.TempDir(), "m.json")
	for _, c := range m.Controls {
		if code, _, errs := gp(t, "", "import", filepath.Join(dir, c.File), "-o", out, "--loss", c.Loss); code != 0 {
			t.Errorf("control %s: exit %d\n%s", c.File, code, errs)
		}
	}
	os.Remove(out)
	for _, c := range m.Cases {
		t.Run(c.File, func(t *testing.T) {
			defer os.Remove(out)
			path := filepath.Join(dir, c.File)
			code, stdout, errs := gp(t, "", "import", path, "-o", out, "--loss", "mse")
			lines := strings.Split(strings.TrimSpace(errs), "\n")
			if code != 2 || stdout != "" {
				t.Fatalf("%s: exit %d, stderr:\n%s", c.Broken, code, errs)
			}
			for _, l := range lines {
				if !strings.HasPrefix(l, path+": ") {
					t.Fatalf("line %q does not start with the file's path", l)
				}
			}
			for _, want := range c.Expect {
				if !strings.Contains(lines[0], want) {
					t.Fatalf("%s: %q does not name %s", c.Broken, lines[0], want)
				}
			}
			if _, err := os.Stat(out); err == nil {
				t.Fatal("a refused import wrote its output")
			}
		})
	}
}
