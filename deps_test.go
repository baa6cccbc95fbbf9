package graphpipe_test

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
)

// module is the import path every project package starts with.
const module = "github.com/graphpipe/graphpipe"

// room is a row of the room table of the design (../shared/DESIGN.md): a
// room, and the project rooms its non-test files import: exactly those, no
// fewer (an import the row does not give is refused) and no more (a room
// the row gives that no file imports is reported, so that the table says
// what the code does). "*" gives every room that is not itself a "*" room
// (bench, cmd), and is not held to equality.
//
// A room's own sub-packages (onnx/onnxpb, bench/cmd/report) belong to it
// unless a row names them: a package is in the room of the longest row
// that is it or a parent of it. A room's imports of its private rooms,
// rows under its own internal/ directory (stage/internal/kernel), need not
// be listed: Go lets no other room import them. So a room nested under
// another is one row, placed below the rooms that import it.
type room struct {
	name    string
	imports []string
}

// roomTable is the room table, ordered from the bottom up: a room imports
// only rooms listed before it.
type roomTable []room

// rooms: internal/... are test harnesses, which import no room: the lowest
// room, which a test helper package (wiretest) may use. internal/regular is
// a room of its own below every other: the few lines that refuse a user's
// file that is not a regular file (a FIFO, a device, a directory), which
// every package that reads one shares (dag, dataset, onnx, runtime; cmd),
// and which import nothing of the project; internal/atomicfile, just above
// it, the few lines that write a whole output file (a device or a FIFO
// written through, never replaced), which every writer shares
// (tensor/cuda's cache, runtime's checkpoint manifest, runtime/supervise,
// cmd).
var rooms = roomTable{
	{"internal/regular", nil},
	{"internal/atomicfile", []string{"internal/regular"}},
	{"internal", nil},
	{"dag", []string{"internal/regular"}},
	{"tensor", nil},
	{"tensor/cuda", []string{"internal/atomicfile", "tensor"}},
	{"partition", []string{"dag"}},
	{"microbatch", []string{"partition"}},
	{"models", []string{"dag"}},
	{"dataset", []string{"internal/regular", "dag", "tensor"}},
	{"onnx", []string{"internal/regular", "dag", "tensor"}},
	{"plan", []string{"dag", "partition", "microbatch"}},
	{"search", []string{"dag", "partition", "microbatch", "plan"}},
	{"sweep", nil},
	{"stage/internal/kernel", []string{"dag", "tensor", "tensor/cuda"}},
	{"stage", []string{"dag", "tensor", "tensor/cuda"}},
	{"chart", []string{"microbatch"}},
	{"runtime/wire", []string{"tensor"}},
	{"runtime/wire/wiretest", []string{"runtime/wire", "internal"}},
	{"profile", []string{"dag", "models", "plan", "stage", "tensor", "tensor/cuda", "runtime/wire"}},
	{"runtime", []string{"internal/regular", "internal/atomicfile", "dag", "tensor", "tensor/cuda", "dataset", "microbatch", "plan", "stage", "runtime/wire"}},
	{"runtime/supervise", []string{"internal/atomicfile", "dag", "tensor", "microbatch", "plan", "stage", "chart", "sweep", "runtime", "runtime/wire"}},
	{"bench", []string{"*"}},
	{"cmd/graphpipe", []string{"*"}},
}

// rank is each room's place in the table, from 0 at the bottom.
func (t roomTable) rank() map[string]int {
	r := map[string]int{}
	for i, row := range t {
		r[row.name] = i
	}
	return r
}

// of is the room a package directory (relative to the module root)
// belongs to: the longest row that is it or a parent of it.
func (t roomTable) of(dir string) (string, bool) {
	best := ""
	for _, r := range t {
		if (dir == r.name || strings.HasPrefix(dir, r.name+"/")) && len(r.name) > len(best) {
			best = r.name
		}
	}
	return best, best != ""
}

// row is a room's row.
func (t roomTable) row(name string) room {
	for _, r := range t {
		if r.name == name {
			return r
		}
	}
	return room{}
}

// any says whether a room's row is "*".
func (r room) any() bool { return slices.Contains(r.imports, "*") }

// private says whether room to is one of from's private rooms (under its
// internal/ directory), which only from can import.
func private(from, to string) bool { return strings.HasPrefix(to, from+"/internal/") }

// validate says what is wrong with the table itself: a row that gives a
// room that is no row, or one not below it.
func (t roomTable) validate() []string {
	rank := t.rank()
	var bad []string
	for i, r := range t {
		for _, imp := range r.imports {
			if j, ok := rank[imp]; imp != "*" && (!ok || j >= i) {
				bad = append(bad, fmt.Sprintf("the room table gives %s %s, which is not a room below it", r.name, imp))
			}
		}
	}
	return bad
}

// refuse says which of the project imports of a package in room the table
// forbids: an import in no room, of a room above it, or of a room its row
// does not give.
func (t roomTable) refuse(room string, imports []string) []string {
	rank, row := t.rank(), t.row(room)
	var bad []string
	for _, imp := range imports {
		to, ok := t.of(imp)
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("%s imports %s, which is in no room", room, imp))
		case to == room:
		case rank[to] >= rank[room]:
			bad = append(bad, fmt.Sprintf("%s imports %s, a room above it", room, imp))
		case row.any() && !t.row(to).any(), private(room, to):
		case !slices.Contains(row.imports, to):
			bad = append(bad, fmt.Sprintf("%s imports %s, which the room table does not give it", room, imp))
		}
	}
	return bad
}

// check holds every package (its directory: its project imports, relative
// to the module) to the table: each import allowed, each package in a room,
// and each room's row equal to what its packages import.
func (t roomTable) check(pkgs map[string][]string) []string {
	bad := t.validate()
	used := map[string]map[string]bool{} // room: the rooms its packages import
	dirs := make([]string, 0, len(pkgs))
	for dir := range pkgs {
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		room, ok := t.of(dir)
		if !ok {
			bad = append(bad, fmt.Sprintf("package %s is in no room: add it to the room table (deps_test.go and ../shared/DESIGN.md)", dir))
			continue
		}
		for _, b := range t.refuse(room, pkgs[dir]) {
			bad = append(bad, fmt.Sprintf("%s (package %s)", b, dir))
		}
		if used[room] == nil {
			used[room] = map[string]bool{}
		}
		for _, imp := range pkgs[dir] {
			if to, ok := t.of(imp); ok {
				used[room][to] = true
			}
		}
	}
	for _, r := range t {
		for _, imp := range r.imports {
			if imp != "*" && !used[r.name][imp] {
				bad = append(bad, fmt.Sprintf("the room table gives %s %s, which none of its files imports: take it out of the row", r.name, imp))
			}
		}
	}
	return bad
}

// skipDir says whether a directory holds no project package: hidden ones,
// test data, build outputs.
func skipDir(name string) bool {
	return strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "out" || name == "bin" || name == "build"
}

// projectImports lists, for each package directory of fsys (the module's
// root), the project packages its non-test files import (relative paths,
// sorted). Every .go file counts whatever its build constraints (a
// //go:build line, a _GOOS or _GOARCH suffix, ignore): each is read with
// go/parser, not through go/build, whose default context skips the files
// other tags or platforms build. Test files (_test.go) may import what
// they need; files the go tool never reads (named _x.go or .x.go) do not
// count.
func projectImports(fsys fs.FS) (map[string][]string, error) {
	out := map[string][]string{}
	fset := token.NewFileSet()
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		switch name := d.Name(); {
		case err != nil:
			return err
		case d.IsDir() && p != "." && skipDir(name):
			return fs.SkipDir
		case d.IsDir(), !strings.HasSuffix(name, ".go"), strings.HasSuffix(name, "_test.go"), strings.HasPrefix(name, "_"), strings.HasPrefix(name, "."):
			return nil
		}
		src, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, p, src, parser.ImportsOnly)
		if err != nil {
			return err
		}
		dir := path.Dir(p)
		imps := out[dir]
		for _, spec := range f.Imports {
			imp, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: import %s: %v", p, spec.Path.Value, err)
			}
			if rel, ok := strings.CutPrefix(imp, module+"/"); ok && !slices.Contains(imps, rel) {
				imps = append(imps, rel)
			}
		}
		sort.Strings(imps)
		out[dir] = imps
		return nil
	})
	return out, err
}

// TestRooms holds every package to the room table.
func TestRooms(t *testing.T) {
	pkgs, err := projectImports(os.DirFS("."))
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 10 {
		t.Fatalf("found %d packages: is the test run from the module root?", len(pkgs))
	}
	for _, bad := range rooms.check(pkgs) {
		t.Error(bad)
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
		{"internal", []string{"internal/regular"}, 1},
		{"internal/regular", []string{"internal"}, 1},
		{"internal/atomicfile", []string{"internal/regular"}, 0},
		{"internal/regular", []string{"internal/atomicfile"}, 1},
		{"dataset", []string{"internal/regular"}, 0},
		{"dataset", []string{"internal/natscluster"}, 1},
		{"runtime", []string{"runtime/supervise", "search"}, 2},
		{"profile", []string{"runtime"}, 1},
		{"stage", []string{"microbatch"}, 1},
		{"stage", []string{"dataset"}, 1},
		{"dag", []string{"tensor"}, 1},
		{"onnx", []string{"onnx/onnxpb", "dag", "tensor"}, 0},
		{"cmd/graphpipe", []string{"runtime/supervise", "search", "internal/natscluster"}, 0},
		{"bench", []string{"cmd/graphpipe"}, 1},
		{"cmd/graphpipe", []string{"bench"}, 1},
		{"plan", []string{"nowhere"}, 1},
	} {
		t.Run(tc.room, func(t *testing.T) {
			if got := rooms.refuse(tc.room, tc.imports); len(got) != tc.bad {
				t.Errorf("refuse(%q, %v) = %q, want %d refusals", tc.room, tc.imports, got, tc.bad)
			}
		})
	}
}

// src is a synthetic Go file: a build constraint (or none), the package
// clause, and imports of project packages.
func src(constraint, pkg string, imports ...string) *fstest.MapFile {
	var b strings.Builder
	if constraint != "" {
		b.WriteString(constraint + "\n\n")
	}
	b.WriteString("package " + pkg + "\n\nimport (\n")
	for _, imp := range imports {
		fmt.Fprintf(&b, "\t_ %q\n", module+"/"+imp)
	}
	b.WriteString(")\n")
	return &fstest.MapFile{Data: []byte(b.String())}
}

// TestRoomsReadEveryFile: on a synthetic module, an upward import is found
// in a file whatever its build constraint (a tag, ignore, another
// platform's suffix), while a test file's is not counted; and a row that
// gives a room no file imports is reported, as is a table that gives a
// room above one.
func TestRoomsReadEveryFile(t *testing.T) {
	table := roomTable{{"lo", nil}, {"mid", []string{"lo"}}, {"hi", []string{"lo", "mid"}}}
	base := fstest.MapFS{
		"lo/lo.go":   src("", "lo"),
		"mid/mid.go": src("", "mid", "lo"),
		"hi/hi.go":   src("", "hi", "lo", "mid"),
		// a test may import what it needs: never counted
		"lo/lo_test.go": src("", "lo", "hi"),
		// a file the go tool never reads
		"lo/_scratch.go": src("", "lo", "hi"),
		"testdata/x.go":  src("", "x", "hi"),
	}
	with := func(name string, f *fstest.MapFile) fstest.MapFS {
		fsys := fstest.MapFS{name: f}
		for k, v := range base {
			fsys[k] = v
		}
		return fsys
	}
	for _, tc := range []struct {
		name string
		fsys fstest.MapFS
		t    roomTable
		want []string
	}{
		{"clean", base, table, nil},
		{"behind a tag", with("lo/lo_toy.go", src("//go:build toyop", "lo", "hi")), table, []string{"lo imports hi, a room above it (package lo)"}},
		{"behind ignore", with("lo/gen.go", src("//go:build ignore", "main", "mid")), table, []string{"lo imports mid, a room above it (package lo)"}},
		{"another platform", with("lo/lo_windows.go", src("", "lo", "mid")), table, []string{"lo imports mid, a room above it (package lo)"}},
		{"not given", with("mid/mid_arm64.go", src("", "mid", "lo")), roomTable{{"lo", nil}, {"other", nil}, {"mid", []string{"other"}}, {"hi", []string{"lo", "mid"}}},
			[]string{"mid imports lo, which the room table does not give it (package mid)", "the room table gives mid other, which none of its files imports: take it out of the row"}},
		{"given, unused", base, roomTable{{"lo", nil}, {"mid", []string{"lo"}}, {"hi", []string{"lo", "mid"}}, {"top", []string{"hi"}}},
			[]string{"the room table gives top hi, which none of its files imports: take it out of the row"}},
		{"table upside down", base, roomTable{{"lo", []string{"hi"}}, {"mid", []string{"lo"}}, {"hi", []string{"lo", "mid"}}},
			[]string{"the room table gives lo hi, which is not a room below it", "the room table gives lo hi, which none of its files imports: take it out of the row"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkgs, err := projectImports(tc.fsys)
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.t.check(pkgs); !slices.Equal(got, tc.want) {
				t.Errorf("check = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRoomsNested: a room nested in another's directory is one row below
// the rooms that import it: here the kernel room the open house issue cuts
// out of stage, which stage imports without listing it (it is stage's
// private room), and which may not import stage back.
func TestRoomsNested(t *testing.T) {
	kernel := room{"stage/internal/kernel", []string{"dag", "tensor", "tensor/cuda"}}
	i := slices.IndexFunc(rooms, func(r room) bool { return r.name == "stage" })
	table := slices.Insert(slices.Clone(rooms), i, kernel)
	pkgs, err := projectImports(os.DirFS("."))
	if err != nil {
		t.Fatal(err)
	}
	pkgs["stage/internal/kernel"] = []string{"dag", "tensor", "tensor/cuda"}
	pkgs["stage"] = append(slices.Clone(pkgs["stage"]), "stage/internal/kernel")
	if bad := table.check(pkgs); len(bad) != 0 {
		t.Errorf("with the kernel room: %q", bad)
	}
	pkgs["stage/internal/kernel"] = []string{"dag", "tensor", "tensor/cuda", "stage"}
	want := "stage/internal/kernel imports stage, a room above it (package stage/internal/kernel)"
	if bad := table.check(pkgs); !slices.Equal(bad, []string{want}) {
		t.Errorf("kernel importing stage: %q, want %q", bad, want)
	}
	pkgs["stage/internal/kernel"] = []string{"dag", "tensor", "tensor/cuda"}
	pkgs["runtime"] = append(slices.Clone(pkgs["runtime"]), "stage/internal/kernel")
	want = "runtime imports stage/internal/kernel, which the room table does not give it (package runtime)"
	if bad := table.check(pkgs); !slices.Equal(bad, []string{want}) {
		t.Errorf("runtime importing stage's kernel room: %q, want %q", bad, want)
	}
}
