package models

import (
	"fmt"
	"math/rand"

	"github.com/graphpipe/graphpipe/dag"
)

// RandomDAG builds a random valid model of exactly n ops (n ≥ 2) for property
// tests: ops read one or two earlier tensors, widths stay [width], costs vary
// (opaque ops with random FLOPs and parameters beside linear layers), and every
// op leads to an mse loss. The same seed gives the same model.
func RandomDAG(seed int64, n int, width int64) (*dag.Graph, error) {
	if n < 2 {
		return nil, fmt.Errorf("RandomDAG: need at least 2 ops, got %d", n)
	}
	r := rand.New(rand.NewSource(seed))
	b := newBuilder(fmt.Sprintf("random-%d-%d", seed, n), Config{Batch: 64, Seed: seed})
	tensors := []string{b.input("x", dag.Shape{width}, dag.Float32)}
	consumed := map[string]bool{}
	pick := func() string {
		// favour recent tensors so that the graph has depth as well as width
		k := len(tensors) - 1 - int(r.ExpFloat64()*3)
		if k < 0 {
			k = r.Intn(len(tensors))
		}
		consumed[tensors[k]] = true
		return tensors[k]
	}
	body := n - 2 // leave room for the final sum and the loss
	for i := 0; i < body; i++ {
		name := fmt.Sprintf("op%d", i)
		var out string
		switch k := r.Intn(10); {
		case k < 4:
			out = b.op(name, dag.Opaque, func(a *dag.Attrs) {
				a.OutShape = dag.Shape{width}
				a.FlopsFwd = float64(1+r.Intn(100)) * 1e6
				a.FlopsBwd = 2 * a.FlopsFwd
				a.Params = int64(r.Intn(4)) * width * width
			}, pick())
		case k < 7:
			out = b.linear(name, pick(), width)
		case k < 8:
			out = b.act(name, dag.ReLU, pick())
		default:
			x, y := pick(), pick()
			out = b.op(name, dag.Add, nil, x, y)
		}
		tensors = append(tensors, out)
	}
	var dangling []string
	for _, t := range tensors[1:] {
		if !consumed[t] {
			dangling = append(dangling, t)
		}
	}
	if len(dangling) == 0 {
		dangling = []string{"x"}
	}
	last := fmt.Sprintf("op%d", body)
	if len(dangling) == 1 {
		b.act(last, dag.ReLU, dangling[0])
	} else {
		b.op(last, dag.Add, nil, dangling...)
	}
	target := b.input("target", dag.Shape{width}, dag.Float32)
	b.op("loss", dag.MSE, nil, last, target)
	return b.build()
}

// Branchy builds a synthetic multi-branch model for search-time benchmarks:
// branches parallel chains of layers linear ops each, joined by a concat, a
// linear head and an mse loss.
func Branchy(branches, layers int, width int64) (*dag.Graph, error) {
	b := newBuilder(fmt.Sprintf("branchy-%dx%d", branches, layers), Config{Batch: 256, Seed: 1})
	var outs []string
	for br := 0; br < branches; br++ {
		x := b.input(fmt.Sprintf("x%d", br), dag.Shape{width}, dag.Float32)
		for l := 0; l < layers; l++ {
			x = b.linear(fmt.Sprintf("b%d.fc%d", br, l), x, width)
		}
		outs = append(outs, x)
	}
	h := b.concat("concat", outs...)
	h = b.linear("head", h, width)
	target := b.input("target", dag.Shape{width}, dag.Float32)
	b.op("loss", dag.MSE, nil, h, target)
	return b.build()
}

// ForkJoin builds a synthetic chain of fork-join blocks for search-time
// benchmarks, the shape of Inception-like models: each block a stem linear
// op, branches parallel chains of two linear ops with a relu between, and
// an add joining them; then an mse loss.
func ForkJoin(blocks, branches int, width int64) (*dag.Graph, error) {
	b := newBuilder(fmt.Sprintf("forkjoin-%dx%d", blocks, branches), Config{Batch: 256, Seed: 1})
	x := b.input("x", dag.Shape{width}, dag.Float32)
	for k := 0; k < blocks; k++ {
		stem := b.linear(fmt.Sprintf("b%d.stem", k), x, width)
		outs := make([]string, branches)
		for br := range outs {
			p := fmt.Sprintf("b%d.br%d", k, br)
			h := b.act(p+".relu", dag.ReLU, b.linear(p+".fc0", stem, width))
			outs[br] = b.linear(p+".fc1", h, width)
		}
		x = b.op(fmt.Sprintf("b%d.join", k), dag.Add, nil, outs...)
	}
	target := b.input("target", dag.Shape{width}, dag.Float32)
	b.op("loss", dag.MSE, nil, x, target)
	return b.build()
}
