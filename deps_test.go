package graphpipe_test

import (
	"fmt"
	"go/build"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// module is the import path every project package starts with.
const module = "github.com/graphpipe/graphpipe"

// rooms is the room table of the design (../shared/DESIGN.md): each room,
// the project rooms its non-test files may import. A room's own
// sub-packages (onnx/onnxpb, bench/cmd/report) belong to it. internal/...
// are test harnesses, which import no room: the lowest room, which a test
// helper package (wiretest) may use. internal/regular is a room of its own
// below every other: the few lines that refuse a user's file that is not a
// regular file (a FIFO, a device, a directory), which every package that
// reads one shares (dag, dataset, onnx, runtime; cmd), and which import
// nothing of the project; internal/atomicfile, just above it, the few lines
// that write a whole output file (a device or a FIFO written through, never
// replaced), which every writer shares (tensor/cuda's cache, runtime's
// checkpoint manifest, runtime/supervise, cmd). The table is ordered from
// the bottom up: a room imports only rooms listed before it.
var rooms = []struct {
	room    string
	imports []string
}{
	{"internal/regular", nil},
	{"internal/atomicfile", []string{"internal/regular"}},
	{"internal", nil},
	{"dag", []string{"internal/regular"}},
	{"tensor", nil},
	{"tensor/cuda", []string{"internal/atomicfile"}},
	{"partition", []string{"dag"}},
	{"microbatch", []string{"partition"}},
	{"models", []string{"dag"}},
	{"dataset", []string{"internal/regular", "dag", "tensor"}},
	{"onnx", []string{"internal/regular", "dag", "tensor"}},
	{"plan", []string{"dag", "partition", "microbatch"}},
	{"search", []string{"dag", "partition", "microbatch", "plan"}},
	{"stage", []string{"dag", "tensor", "tensor/cuda", "dataset"}},
	{"chart", []string{"microbatch"}},
	{"runtime/wire", []string{"tensor"}},
	{"runtime/wire/wiretest", []string{"runtime/wire", "internal"}},
	{"profile", []string{"dag", "models", "plan", "stage", "tensor", "tensor/cuda", "runtime/wire"}},
	{"runtime", []string{"internal/regular", "internal/atomicfile", "dag", "tensor", "tensor/cuda", "dataset", "microbatch", "plan", "stage", "runtime/wire"}},
	{"runtime/supervise", []string{"internal/atomicfile", "dag", "tensor", "tensor/cuda", "dataset", "microbatch", "plan", "stage", "chart", "runtime", "runtime/wire"}},
	{"bench", []string{"*"}},
	{"cmd/graphpipe", []string{"*"}},
}

// roomOf is the room a package directory (relative to the module root)
// belongs to: the longest room that is it or a parent of it.
func roomOf(dir string) (string, bool) {
	best := ""
	for _, r := range rooms {
		if (dir == r.room || strings.HasPrefix(dir, r.room+"/")) && len(r.room) > len(best) {
			best = r.room
		}
	}
	return best, best != ""
}

// checkImports says which of a room's project imports the table forbids:
// an import of a room not in its list (its own sub-packages and
// internal/... aside for bench and cmd), and of a room above it.
func checkImports(room string, imports []string) []string {
	var allowed []string
	rank := map[string]int{}
	for i, r := range rooms {
		rank[r.room] = i
		if r.room == room {
			allowed = r.imports
		}
	}
	var bad []string
	for _, imp := range imports {
		to, ok := roomOf(imp)
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("%s imports %s, which is in no room", room, imp))
		case to == room:
		case slices.Contains(allowed, "*") && to != "bench" && to != "cmd/graphpipe":
		case rank[to] >= rank[room]:
			bad = append(bad, fmt.Sprintf("%s imports %s, a room above it", room, imp))
		case !slices.Contains(allowed, to):
			bad = append(bad, fmt.Sprintf("%s imports %s, which the room table does not give it", room, imp))
		}
	}
	return bad
}

// projectImports lists, for each package directory under the module root,
// the project packages its non-test files import (relative paths).
func projectImports(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "out" || name == "bin" || name == "build") {
			return filepath.SkipDir
		}
		p, err := build.ImportDir(path, 0)
		if err != nil || len(p.GoFiles) == 0 {
			return nil // no Go files, or only tests (this one)
		}
		var imps []string
		for _, imp := range p.Imports {
			if rel, ok := strings.CutPrefix(imp, module+"/"); ok {
				imps = append(imps, rel)
			}
		}
		sort.Strings(imps)
		out[filepath.ToSlash(path)] = imps
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRooms holds every package to the room table.
func TestRooms(t *testing.T) {
	pkgs := projectImports(t)
	if len(pkgs) < 10 {
		t.Fatalf("found %d packages: is the test run from the module root?", len(pkgs))
	}
	for dir, imps := range pkgs {
		room, ok := roomOf(dir)
		if !ok {
			t.Errorf("package %s is in no room: add it to the room table (deps_test.go and ../shared/DESIGN.md)", dir)
			continue
		}
		for _, bad := range checkImports(room, imps) {
			t.Errorf("%s (package %s)", bad, dir)
		}
	}
}

// TestRoomsRefuse checks that the check can fail: a lower room importing a
// higher one, or a room it was not given, is refused.
func TestRoomsRefuse(t *testing.T) {
	for _, tc := range []struct {
		room    string
		imports []string
		bad     int
	}{
		{"plan", []string{"search"}, 1},
		{"runtime/wire", []string{"runtime"}, 1},
		{"runtime/wire", []string{"internal/natscluster"}, 1},
		{"internal", []string{"dag"}, 1},
		{"internal/regular", []string{"internal"}, 1},
		{"dataset", []string{"internal/regular"}, 0},
		{"dataset", []string{"internal/natscluster"}, 1},
		{"runtime", []string{"runtime/supervise", "search"}, 2},
		{"profile", []string{"runtime"}, 1},
		{"stage", []string{"microbatch"}, 1},
		{"dag", []string{"tensor"}, 1},
		{"onnx", []string{"onnx/onnxpb", "dag", "tensor"}, 0},
		{"cmd/graphpipe", []string{"runtime/supervise", "search", "internal/natscluster"}, 0},
		{"bench", []string{"cmd/graphpipe"}, 1},
	} {
		t.Run(tc.room, func(t *testing.T) {
			if got := checkImports(tc.room, tc.imports); len(got) != tc.bad {
				t.Errorf("checkImports(%q, %v) = %q, want %d refusals", tc.room, tc.imports, got, tc.bad)
			}
		})
	}
}
