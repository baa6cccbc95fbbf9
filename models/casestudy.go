package models

import (
	"fmt"

	"github.com/graphpipe/graphpipe/dag"
)

func init() {
	register(&Entry{
		Name:        "case-study",
		Description: "the paper's case study: 2 branches of 4 × [attention + 2 linear], concatenated, one head",
		Knobs:       []string{"batch", "seed", "branches", "layers", "hidden", "ffn", "seq", "heads", "classes"},
		Default:     Config{Batch: 128, Seed: 1, Branches: 2, Layers: 4, Hidden: 1024, FFN: 4096, Seq: 256, Heads: 16, Classes: 1000},
		Small:       Config{Batch: 16, Seed: 1, Branches: 2, Layers: 2, Hidden: 32, FFN: 64, Seq: 8, Heads: 4, Classes: 8},
		build:       buildCaseStudy,
	})
}

// buildCaseStudy gives each branch a float input [seq, hidden] and layers of
// attention, linear to ffn, gelu, linear back to hidden.
func buildCaseStudy(c Config) (*dag.Graph, error) {
	b := newBuilder("case-study", c)
	var pooled []string
	for br := int64(0); br < c.Branches; br++ {
		p := fmt.Sprintf("b%d", br)
		x := b.input(p+".x", dag.Shape{c.Seq, c.Hidden}, dag.Float32)
		for l := int64(0); l < c.Layers; l++ {
			q := fmt.Sprintf("%s.l%d", p, l)
			x = b.op(q+".attn", dag.Attention, func(a *dag.Attrs) { a.Heads = c.Heads }, x)
			x = b.linear(q+".fc1", x, c.FFN)
			x = b.act(q+".gelu", dag.GELU, x)
			x = b.linear(q+".fc2", x, c.Hidden)
		}
		pooled = append(pooled, b.mean(p+".pool", x, 0))
	}
	label := b.indices("label", dag.Shape{}, c.Classes)
	h := b.concat("concat", pooled...)
	h = b.linear("head", h, c.Classes)
	b.op("loss", dag.SoftmaxCrossEntropy, nil, h, label)
	return b.build()
}
