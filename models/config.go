package models

import (
	"fmt"
	"reflect"
	"slices"
)

// Config holds every knob of every zoo model; an Entry says which apply.
type Config struct {
	Batch          int64 `knob:"batch" help:"global mini-batch (samples per iteration)"`
	Seed           int64 `knob:"seed" help:"seed for parameter initialisation and synthetic data"`
	Branches       int64 `knob:"branches" help:"parallel branches (dense branches for DLRM)"`
	SparseBranches int64 `knob:"sparse-branches" help:"embedding-bag branches (DLRM)"`
	Layers         int64 `knob:"layers" help:"layers per branch"`
	TopLayers      int64 `knob:"top-layers" help:"layers after the branches join"`
	Hidden         int64 `knob:"hidden" help:"width: model dimension or feed-forward width"`
	Input          int64 `knob:"input" help:"width of each dense input"`
	FFN            int64 `knob:"ffn" help:"feed-forward inner width of a Transformer layer"`
	Seq            int64 `knob:"seq" help:"sequence length"`
	Heads          int64 `knob:"heads" help:"attention heads"`
	Vocab          int64 `knob:"vocab" help:"token vocabulary per branch"`
	Rows           int64 `knob:"rows" help:"embedding-bag table rows"`
	EmbDim         int64 `knob:"emb-dim" help:"embedding-bag dimension"`
	Bag            int64 `knob:"bag" help:"indices per embedding bag"`
	Classes        int64 `knob:"classes" help:"output classes"`
}

// Knob describes one Config field.
type Knob struct {
	Name, Help string
	index      int
}

// Knobs lists every Config field in declaration order.
func Knobs() []Knob {
	t := reflect.TypeOf(Config{})
	out := make([]Knob, t.NumField())
	for i := range out {
		f := t.Field(i)
		out[i] = Knob{Name: f.Tag.Get("knob"), Help: f.Tag.Get("help"), index: i}
	}
	return out
}

// Get returns the value of the named knob.
func (c *Config) Get(name string) int64 {
	return reflect.ValueOf(c).Elem().Field(knobIndex(name)).Int()
}

// Set sets the named knob.
func (c *Config) Set(name string, v int64) {
	reflect.ValueOf(c).Elem().Field(knobIndex(name)).SetInt(v)
}

func knobIndex(name string) int {
	for _, k := range Knobs() {
		if k.Name == name {
			return k.index
		}
	}
	panic("models: no knob " + name)
}

// ConfigError is a config value an entry cannot build.
type ConfigError struct {
	Model, Knob, Msg string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("model %s: --%s: %s", e.Model, e.Knob, e.Msg)
}

// maxOps bounds the size of a generated graph so that a typo in a flag does
// not exhaust memory; it is far above every paper model (a few hundred ops).
const maxOps = 1_000_000

// check refuses knob values that cannot build: every knob but seed must be
// positive, and the graph must stay under maxOps ops.
func (e *Entry) check(c Config) error {
	for _, k := range e.Knobs {
		if k != "seed" && c.Get(k) <= 0 {
			return &ConfigError{e.Name, k, fmt.Sprintf("must be a positive integer, got %d", c.Get(k))}
		}
	}
	ops := float64(1)
	for _, k := range []string{"branches", "sparse-branches", "layers", "top-layers"} {
		if slices.Contains(e.Knobs, k) {
			ops += float64(c.Get(k)) * 8
		}
	}
	if slices.Contains(e.Knobs, "branches") && slices.Contains(e.Knobs, "layers") {
		ops += float64(c.Get("branches")) * float64(c.Get("layers")) * 8
	}
	if ops > maxOps {
		return &ConfigError{e.Name, "layers", fmt.Sprintf("the graph would have about %.0f ops, more than the %d a generated model may have", ops, maxOps)}
	}
	return nil
}
