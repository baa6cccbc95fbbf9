package models

import (
	"reflect"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
)

// TestRoundTrip builds every zoo model, default and small, writes it and
// reloads it to an identical graph.
func TestRoundTrip(t *testing.T) {
	for _, e := range List() {
		for _, preset := range []string{"default", "small"} {
			t.Run(e.Name+"/"+preset, func(t *testing.T) {
				cfg, err := e.Preset(preset)
				if err != nil {
					t.Fatal(err)
				}
				g, err := e.Build(cfg)
				if err != nil {
					t.Fatal(err)
				}
				g2, err := dag.Load(dag.Write(g.Model()))
				if err != nil {
					t.Fatalf("reload: %v", err)
				}
				if !reflect.DeepEqual(g, g2) {
					t.Fatal("reloaded graph differs")
				}
				g3, _ := e.Build(cfg)
				if !reflect.DeepEqual(g, g3) {
					t.Fatal("building twice gives different graphs")
				}
			})
		}
	}
}

func TestZooShapes(t *testing.T) {
	want := map[string]int{"mmt": 4, "dlrm": 14, "candle-uno": 7, "case-study": 2, "transformer": 0, "mlp": 0}
	for _, e := range List() {
		g, err := e.Build(e.Default)
		if err != nil {
			t.Fatal(err)
		}
		secs := g.Branches()
		got := 0
		for _, s := range secs {
			got = max(got, len(s.Branches))
		}
		if got != want[e.Name] {
			t.Errorf("%s: %d parallel branches, want %d", e.Name, got, want[e.Name])
		}
	}
}

// TestDefaultsArePaper pins the paper's configurations (../shared/background.md).
func TestDefaultsArePaper(t *testing.T) {
	m, _ := Lookup("mmt")
	if c := m.Default; c.Branches != 4 || c.Layers != 8 || c.Seq != 256 || c.Hidden != 1024 || c.Heads != 16 || c.FFN != 4096 {
		t.Errorf("mmt default %+v", c)
	}
	d, _ := Lookup("dlrm")
	if c := d.Default; c.Branches != 7 || c.SparseBranches != 7 || c.Layers != 4 || c.Hidden != 4096 || c.Input != 4096 || c.Rows != 1_000_000 || c.EmbDim != 64 || c.Bag != 100 {
		t.Errorf("dlrm default %+v", c)
	}
	u, _ := Lookup("candle-uno")
	if c := u.Default; c.Branches != 7 || c.Layers != 4 || c.Hidden != 4096 || c.Input != 4096 {
		t.Errorf("candle-uno default %+v", c)
	}
	s, _ := Lookup("transformer")
	if c := s.Default; c.Layers != m.Default.Branches*m.Default.Layers || c.Hidden != m.Default.Hidden {
		t.Errorf("transformer default %+v is not MMT's size", c)
	}
	cs, _ := Lookup("case-study")
	if c := cs.Default; c.Branches != 2 || c.Layers != 4 {
		t.Errorf("case-study default %+v", c)
	}
}

func TestConfigRefusals(t *testing.T) {
	m, _ := Lookup("mmt")
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"zero layers", func(c *Config) { c.Layers = 0 }, "model mmt: --layers: must be a positive integer, got 0"},
		{"huge", func(c *Config) { c.Layers = 1 << 40 }, "more than the 1000000"},
		{"heads", func(c *Config) { c.Heads = 5 }, `attrs.heads`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := m.Small
			tc.edit(&c)
			_, err := m.Build(c)
			if err == nil || !contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := Lookup("gpt"); err == nil || !contains(err.Error(), "known: candle-uno") {
		t.Errorf("lookup: %v", err)
	}
	if _, err := m.Preset("large"); err == nil {
		t.Error("preset large accepted")
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestKnobs(t *testing.T) {
	var c Config
	for i, k := range Knobs() {
		c.Set(k.Name, int64(i+1))
		if c.Get(k.Name) != int64(i+1) {
			t.Fatalf("knob %s does not round-trip", k.Name)
		}
	}
	for _, e := range List() {
		for _, k := range e.Knobs {
			knobIndex(k) // panics on a knob Config lacks
		}
	}
}
