package models

import (
	"fmt"
	"sort"
	"strings"

	"github.com/graphpipe/graphpipe/dag"
)

// Entry is one model of the zoo.
type Entry struct {
	Name        string
	Description string
	Knobs       []string // the Config fields this model reads
	Default     Config   // the paper's configuration
	Small       Config   // trains in seconds on a CPU
	build       func(Config) (*dag.Graph, error)
}

// Build checks the config and builds the model's graph.
func (e *Entry) Build(c Config) (*dag.Graph, error) {
	if err := e.check(c); err != nil {
		return nil, err
	}
	g, err := e.build(c)
	if err != nil {
		return nil, fmt.Errorf("model %s: the config builds an invalid graph:\n%w", e.Name, err)
	}
	return g, nil
}

// Preset returns the named config: "default" (or "") or "small".
func (e *Entry) Preset(name string) (Config, error) {
	switch name {
	case "", "default", "paper":
		return e.Default, nil
	case "small":
		return e.Small, nil
	}
	return Config{}, fmt.Errorf("unknown preset %q (known: default, small)", name)
}

var zoo = map[string]*Entry{}

func register(e *Entry) { zoo[e.Name] = e }

// List returns the zoo, sorted by name.
func List() []*Entry {
	out := make([]*Entry, 0, len(zoo))
	for _, e := range zoo {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Lookup finds a zoo entry by name.
func Lookup(name string) (*Entry, error) {
	if e, ok := zoo[name]; ok {
		return e, nil
	}
	names := make([]string, 0, len(zoo))
	for _, e := range List() {
		names = append(names, e.Name)
	}
	return nil, fmt.Errorf("unknown model %q (known: %s)", name, strings.Join(names, ", "))
}
