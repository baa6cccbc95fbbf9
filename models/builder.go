package models

import (
	"fmt"

	"github.com/graphpipe/graphpipe/dag"
)

// builder appends inputs and ops to a model document, naming ops by prefix.
type builder struct{ m dag.Model }

func newBuilder(name string, c Config) *builder {
	return &builder{m: dag.Model{Name: name, BatchSize: c.Batch, Seed: c.Seed}}
}

func (b *builder) input(name string, shape dag.Shape, dt dag.DType) string {
	b.m.Inputs = append(b.m.Inputs, dag.Input{Name: name, Shape: shape, DType: dt})
	return name
}

func (b *builder) indices(name string, shape dag.Shape, hi int64) string {
	b.m.Inputs = append(b.m.Inputs, dag.Input{Name: name, Shape: shape, DType: dag.Int32, Range: &[2]int64{0, hi}})
	return name
}

func (b *builder) op(name string, kind dag.Kind, set func(*dag.Attrs), inputs ...string) string {
	a := dag.DefaultAttrs(kind)
	if set != nil {
		set(&a)
	}
	b.m.Ops = append(b.m.Ops, dag.Op{Name: name, Kind: kind, Inputs: inputs, Attrs: a})
	return name
}

func (b *builder) linear(name, x string, out int64) string {
	return b.op(name, dag.Linear, func(a *dag.Attrs) { a.Out = out }, x)
}

func (b *builder) act(name string, kind dag.Kind, x string) string { return b.op(name, kind, nil, x) }

func (b *builder) mean(name, x string, axis int64) string {
	return b.op(name, dag.Mean, func(a *dag.Attrs) { a.Axis = axis }, x)
}

func (b *builder) concat(name string, xs ...string) string {
	if len(xs) == 1 {
		return xs[0]
	}
	return b.op(name, dag.Concat, nil, xs...)
}

// mlp stacks n linear+relu layers of the given width.
func (b *builder) mlp(prefix, x string, n, width int64) string {
	for l := int64(0); l < n; l++ {
		x = b.linear(fmt.Sprintf("%s.fc%d", prefix, l), x, width)
		x = b.act(fmt.Sprintf("%s.relu%d", prefix, l), dag.ReLU, x)
	}
	return x
}

// transformerLayer is a pre-norm layer: x + attn(ln1(x)), then + ffn(ln2(·)).
func (b *builder) transformerLayer(p, x string, heads, ffn, d int64, causal bool) string {
	h := b.op(p+".ln1", dag.LayerNorm, nil, x)
	h = b.op(p+".attn", dag.Attention, func(a *dag.Attrs) { a.Heads, a.Causal = heads, causal }, h)
	x = b.op(p+".res1", dag.Add, nil, x, h)
	h = b.op(p+".ln2", dag.LayerNorm, nil, x)
	h = b.linear(p+".fc1", h, ffn)
	h = b.act(p+".gelu", dag.GELU, h)
	h = b.linear(p+".fc2", h, d)
	return b.op(p+".res2", dag.Add, nil, x, h)
}

func (b *builder) build() (*dag.Graph, error) { return dag.Build(&b.m) }
