package runtime

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"runtime/metrics"
	"strings"
	"testing"
)

// TestStoredManifests: the manifests kept as fuzz seeds (written by runs,
// one from before manifests named their run and seed) decode; edits a
// person or a broken disk might make are refused, naming the field.
func TestStoredManifests(t *testing.T) {
	files, _ := filepath.Glob("testdata/manifests/*.json")
	if len(files) < 3 {
		t.Fatalf("%d manifests", len(files))
	}
	for _, file := range files {
		data, _ := os.ReadFile(file)
		m, err := DecodeManifest(data)
		if err != nil || m.Step < 1 || len(m.ModelHash) != 64 {
			t.Errorf("%s: %+v, %v", file, m, err)
		}
	}
	good, _ := os.ReadFile("testdata/manifests/dlrm-sgd-seed42.json")
	if m, _ := DecodeManifest(good); m.Run != "demo" || m.Seed != 42 {
		t.Errorf("run %q, seed %d: want demo and 42", m.Run, m.Seed)
	}
	for _, tc := range []struct{ old, new, want string }{
		{`"step": 4`, `"step": -4`, "step: must not be negative"},
		{`"optimizer_step": 0`, `"optimizer_step": -1`, "optimizer_step: must not be negative"},
		{`"optim.safetensors": "`, `"optim.safetensors": "zz`, "files: optim.safetensors"},
		{`"params.safetensors"`, `"weights.safetensors"`, "files: params.safetensors"},
		{`"format": "graphpipe/checkpoint@1"`, `"format": "graphpipe/checkpoint@3"`, "not a graphpipe/checkpoint@2 (or @1) manifest"},
		{`"format": "graphpipe/checkpoint@1"`, `"format": "graphpipe/checkpoint@2"`, "a graphpipe/checkpoint@2 manifest names shards, not files"},
		{`"seed": 42`, `"seed": 42, "colour": 1`, "not a graphpipe/checkpoint@2 (or @1) manifest"},
	} {
		bad := strings.Replace(string(good), tc.old, tc.new, 1)
		if bad == string(good) {
			t.Fatalf("edit %q did nothing", tc.old)
		}
		if _, err := DecodeManifest([]byte(bad)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.new, err, tc.want)
		}
	}
}

// FuzzDecodeManifest: a checkpoint manifest (the seeds: real ones) is
// refused with one line, or decodes to a manifest that encodes and decodes
// back to itself; reading it allocates no more than its size calls for.
func FuzzDecodeManifest(f *testing.F) {
	files, _ := filepath.Glob("testdata/manifests/*.json")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"format": "graphpipe/checkpoint@1"}`))
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	f.Fuzz(func(t *testing.T, data []byte) {
		metrics.Read(sample)
		before := sample[0].Value.Uint64()
		m, err := DecodeManifest(data)
		metrics.Read(sample)
		if n := sample[0].Value.Uint64() - before; n > 1<<20+512*uint64(len(data)) {
			t.Fatalf("%d bytes allocated for a manifest of %d", n, len(data))
		}
		if err != nil {
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("refusal spans lines: %q", err)
			}
			return
		}
		again, _ := json.Marshal(m)
		m2, err := DecodeManifest(again)
		if err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip: %v\n%+v\n%+v", err, m, m2)
		}
	})
}
