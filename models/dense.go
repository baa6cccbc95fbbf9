package models

import (
	"fmt"

	"github.com/graphpipe/graphpipe/dag"
)

func init() {
	register(&Entry{
		Name:        "dlrm",
		Description: "DLRM: dense feed-forward branches and embedding-bag branches, concatenated, then an MLP and a click logit",
		Knobs:       []string{"batch", "seed", "branches", "sparse-branches", "layers", "top-layers", "hidden", "input", "rows", "emb-dim", "bag"},
		Default: Config{Batch: 1024, Seed: 1, Branches: 7, SparseBranches: 7, Layers: 4, TopLayers: 4,
			Hidden: 4096, Input: 4096, Rows: 1_000_000, EmbDim: 64, Bag: 100},
		Small: Config{Batch: 32, Seed: 1, Branches: 3, SparseBranches: 3, Layers: 2, TopLayers: 2,
			Hidden: 32, Input: 16, Rows: 100, EmbDim: 8, Bag: 4},
		build: buildDLRM,
	})
	register(&Entry{
		Name:        "candle-uno",
		Description: "CANDLE-Uno: feed-forward feature-encoder branches, concatenated, dense layers, one regression output",
		Knobs:       []string{"batch", "seed", "branches", "layers", "top-layers", "hidden", "input"},
		Default:     Config{Batch: 1024, Seed: 1, Branches: 7, Layers: 4, TopLayers: 4, Hidden: 4096, Input: 4096},
		Small:       Config{Batch: 32, Seed: 1, Branches: 3, Layers: 2, TopLayers: 2, Hidden: 32, Input: 16},
		build:       buildCandle,
	})
	register(&Entry{
		Name:        "mlp",
		Description: "a plain multi-layer perceptron: one chain of linear+relu layers and a classifier",
		Knobs:       []string{"batch", "seed", "layers", "hidden", "input", "classes"},
		Default:     Config{Batch: 256, Seed: 1, Layers: 8, Hidden: 4096, Input: 1024, Classes: 1000},
		Small:       Config{Batch: 32, Seed: 1, Layers: 3, Hidden: 64, Input: 32, Classes: 8},
		build:       buildMLP,
	})
}

// denseBranches adds n branches, each a dense input and an MLP.
func denseBranches(b *builder, prefix string, c Config) []string {
	var outs []string
	for br := int64(0); br < c.Branches; br++ {
		p := fmt.Sprintf("%s%d", prefix, br)
		x := b.input(p+".x", dag.Shape{c.Input}, dag.Float32)
		outs = append(outs, b.mlp(p, x, c.Layers, c.Hidden))
	}
	return outs
}

func buildDLRM(c Config) (*dag.Graph, error) {
	b := newBuilder("dlrm", c)
	parts := denseBranches(b, "dense", c)
	for br := int64(0); br < c.SparseBranches; br++ {
		p := fmt.Sprintf("sparse%d", br)
		idx := b.indices(p+".idx", dag.Shape{c.Bag}, c.Rows)
		parts = append(parts, b.op(p+".bag", dag.EmbeddingBag, func(a *dag.Attrs) {
			a.Num, a.Dim, a.Mode = c.Rows, c.EmbDim, "sum"
		}, idx))
	}
	h := b.concat("concat", parts...)
	h = b.mlp("top", h, c.TopLayers, c.Hidden)
	h = b.linear("top.out", h, 1)
	target := b.input("click", dag.Shape{1}, dag.Float32)
	b.op("loss", dag.BCEWithLogits, nil, h, target)
	return b.build()
}

func buildCandle(c Config) (*dag.Graph, error) {
	b := newBuilder("candle-uno", c)
	h := b.concat("concat", denseBranches(b, "feat", c)...)
	h = b.mlp("top", h, c.TopLayers, c.Hidden)
	h = b.linear("top.out", h, 1)
	target := b.input("response", dag.Shape{1}, dag.Float32)
	b.op("loss", dag.MSE, nil, h, target)
	return b.build()
}

func buildMLP(c Config) (*dag.Graph, error) {
	b := newBuilder("mlp", c)
	x := b.input("x", dag.Shape{c.Input}, dag.Float32)
	h := b.mlp("mlp", x, c.Layers, c.Hidden)
	h = b.linear("head", h, c.Classes)
	label := b.indices("label", dag.Shape{}, c.Classes)
	b.op("loss", dag.SoftmaxCrossEntropy, nil, h, label)
	return b.build()
}
