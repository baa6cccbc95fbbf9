package readme

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// linkRE finds a Markdown link's or image's target, an HTML src or href,
// and a path in a code span that climbs out of its directory (`../x`).
var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)|(?:src|href)="([^"]+)"|` + "`" + `(\.\./[^` + "`" + `\s]+)` + "`")

// fenceRE is a fenced code block: code, not links.
var fenceRE = regexp.MustCompile("(?ms)^\\s*```.*?^\\s*```")

// outsideLinks lists the links of the Markdown file path (in the
// repository at root) that lead outside the repository or to nothing: a
// clone has only what the repository holds.
func outsideLinks(root, path, text string) []string {
	var bad []string
	for _, m := range linkRE.FindAllStringSubmatch(fenceRE.ReplaceAllString(text, ""), -1) {
		target := m[1] + m[2] + m[3]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "#") {
			continue
		}
		target, _, _ = strings.Cut(target, "#")
		if filepath.IsAbs(target) {
			bad = append(bad, target+" (an absolute path)")
			continue
		}
		full := filepath.Join(filepath.Dir(path), target)
		rel, err := filepath.Rel(root, full)
		switch {
		case err != nil || !filepath.IsLocal(rel):
			bad = append(bad, target+" (outside the repository)")
		case fileMissing(full):
			bad = append(bad, target+" (not in the repository)")
		}
	}
	return bad
}

func fileMissing(path string) bool {
	_, err := os.Stat(path)
	return err != nil
}

// TestLinksStayInTheRepository: the README and the docs link only to
// files of the repository (or to the web): no ../shared/..., which a clone
// does not have.
func TestLinksStayInTheRepository(t *testing.T) {
	root, _ := filepath.Abs("../..")
	files, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	files = append(files, filepath.Join(root, "README.md"), filepath.Join(root, "BENCHMARKS.md"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range outsideLinks(root, f, string(b)) {
			t.Errorf("%s links to %s", f, l)
		}
	}
}

// TestOutsideLinksFound: the check finds links that leave the repository
// or lead nowhere, and passes those that do not.
func TestOutsideLinksFound(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "docs"), 0o755)
	os.WriteFile(filepath.Join(root, "docs", "a.md"), nil, 0o644)
	readme := filepath.Join(root, "README.md")
	for _, tc := range []struct {
		text string
		bad  int
	}{
		{"see [a](docs/a.md#top), [web](https://example.org), [here](#x)", 0},
		{"the spec: [spec](../shared/spec/model-json.md)", 1},
		{"it started as `../shared/spec/model-json.md`", 1},
		{`<img src="bench/none.svg">`, 1},
		{"[abs](/etc/passwd)", 1},
		{"```go\nfunc k[T Num](*opArgs) {}\n```\n", 0},
	} {
		if got := outsideLinks(root, readme, tc.text); len(got) != tc.bad {
			t.Errorf("%q: %v, want %d", tc.text, got, tc.bad)
		}
	}
}
