package dag

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime/metrics"
	"strings"
	"testing"
)

// FuzzLoad feeds the loader arbitrary bytes, from a seed corpus of the model
// files under testdata. It must never panic nor allocate more than the
// input's size calls for; a refusal is an Errors value of single-line
// problems; a document that loads must survive a canonical write and reload
// unchanged.
func FuzzLoad(f *testing.F) {
	for _, dir := range []string{"testdata/valid", "testdata/invalid"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"format": "graphpipe/model@1", "batch_size": 1, "inputs": [], "ops": []}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var g *Graph
		var err error
		sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
		metrics.Read(sample)
		before := sample[0].Value.Uint64()
		g, err = Load(data)
		metrics.Read(sample)
		// a bounded multiple of what it reads, never what an input declares
		if n := sample[0].Value.Uint64() - before; n > 1<<20+1024*uint64(len(data)) {
			t.Fatalf("%d bytes allocated for a model of %d", n, len(data))
		}
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("refusal is %T %v, not Errors", err, err)
			}
			for _, e := range es {
				if strings.ContainsAny(e.Error(), "\n\r") {
					t.Fatalf("problem spans lines: %q", e.Error())
				}
			}
			return
		}
		out := Write(g.Model())
		g2, err := Load(out)
		if err != nil {
			t.Fatalf("canonical form does not reload: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(g, g2) {
			t.Fatalf("canonical form reloads to a different graph:\n%s", out)
		}
	})
}
