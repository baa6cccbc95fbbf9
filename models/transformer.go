package models

import (
	"fmt"

	"github.com/graphpipe/graphpipe/dag"
)

var transformerKnobs = []string{"batch", "seed", "layers", "hidden", "ffn", "seq", "heads", "vocab", "classes"}

func init() {
	register(&Entry{
		Name:        "mmt",
		Description: "multi-modal Transformer: parallel Transformer branches, pooled, concatenated, one head (paper: 4 × 8 layers)",
		Knobs:       append([]string{"branches"}, transformerKnobs...),
		Default:     Config{Batch: 128, Seed: 1, Branches: 4, Layers: 8, Hidden: 1024, FFN: 4096, Seq: 256, Heads: 16, Vocab: 8192, Classes: 1000},
		Small:       Config{Batch: 16, Seed: 1, Branches: 3, Layers: 2, Hidden: 32, FFN: 64, Seq: 8, Heads: 4, Vocab: 64, Classes: 8},
		build:       func(c Config) (*dag.Graph, error) { return buildTransformer("mmt", c) },
	})
	register(&Entry{
		Name:        "transformer",
		Description: "sequential Transformer of MMT's size (the control): one branch of 32 layers",
		Knobs:       transformerKnobs,
		Default:     Config{Batch: 128, Seed: 1, Branches: 1, Layers: 32, Hidden: 1024, FFN: 4096, Seq: 256, Heads: 16, Vocab: 8192, Classes: 1000},
		Small:       Config{Batch: 16, Seed: 1, Branches: 1, Layers: 6, Hidden: 32, FFN: 64, Seq: 8, Heads: 4, Vocab: 64, Classes: 8},
		build: func(c Config) (*dag.Graph, error) {
			c.Branches = 1
			return buildTransformer("transformer", c)
		},
	})
}

// buildTransformer builds c.Branches token branches: embedding, c.Layers
// pre-norm layers, mean over the sequence; then concat, a linear head and
// softmax cross-entropy.
func buildTransformer(name string, c Config) (*dag.Graph, error) {
	b := newBuilder(name, c)
	var pooled []string
	for br := int64(0); br < c.Branches; br++ {
		p := fmt.Sprintf("b%d", br)
		if c.Branches == 1 {
			p = "enc"
		}
		tok := b.indices(p+".tokens", dag.Shape{c.Seq}, c.Vocab)
		x := b.op(p+".emb", dag.Embedding, func(a *dag.Attrs) { a.Num, a.Dim = c.Vocab, c.Hidden }, tok)
		for l := int64(0); l < c.Layers; l++ {
			x = b.transformerLayer(fmt.Sprintf("%s.l%d", p, l), x, c.Heads, c.FFN, c.Hidden, false)
		}
		pooled = append(pooled, b.mean(p+".pool", x, 0))
	}
	label := b.indices("label", dag.Shape{}, c.Classes)
	h := b.concat("concat", pooled...)
	h = b.linear("head", h, c.Classes)
	b.op("loss", dag.SoftmaxCrossEntropy, nil, h, label)
	return b.build()
}
