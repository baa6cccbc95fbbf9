package stage

import (
	"testing"

	"github.com/graphpipe/graphpipe/models"
)

// BenchmarkBackwardSplit times one micro-batch's backward of the case study
// (attention and linear layers, sequence 64, width 128) whole, and split
// into the inputs' pass and the weights' pass (schedule zb): the split should
// cost about the same, not redo the attention's inner backward.
func BenchmarkBackwardSplit(b *testing.B) {
	e, err := models.Lookup("case-study")
	if err != nil {
		b.Fatal(err)
	}
	cfg := e.Small
	cfg.Seq, cfg.Hidden, cfg.FFN, cfg.Batch = 64, 128, 256, 8
	g, err := e.Build(cfg)
	if err != nil {
		b.Fatal(err)
	}
	tr, err := NewTrainer(g, TrainOptions{Optimizer: "sgd", LR: 0.1})
	if err != nil {
		b.Fatal(err)
	}
	feeds, err := tr.Data.Batch(0, int(g.BatchSize()))
	if err != nil {
		b.Fatal(err)
	}
	loss := g.Op(g.Loss()).Name
	for _, split := range []bool{false, true} {
		name := "whole"
		if split {
			name = "split"
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				if _, err := tr.Ex.Forward(0, Position{}, feeds); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				seed := &Value[float32]{Shape: []int{1}, Data: []float32{1}}
				if _, err := tr.Ex.Backward(0, map[string]*Value[float32]{loss: seed}, !split); err != nil {
					b.Fatal(err)
				}
				if split {
					if err := tr.Ex.Weights(0); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
