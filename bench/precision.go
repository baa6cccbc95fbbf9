package bench

import (
	"fmt"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/search"
)

// GPT7B is the 6.6-billion-parameter GPT-shaped transformer of issue 47:
// models export transformer --layers 32 --hidden 4096 --ffn 16384 --seq
// 2048 --heads 32 --vocab 32000 --batch 512.
func GPT7B() (*dag.Graph, error) {
	e, err := models.Lookup("transformer")
	if err != nil {
		return nil, err
	}
	c := e.Default
	c.Layers, c.Hidden, c.FFN, c.Seq, c.Heads, c.Vocab, c.Batch = 32, 4096, 16384, 2048, 32, 32000, 512
	return e.Build(c)
}

// flopsPerSample is g's forward and backward FLOPs per sample.
func flopsPerSample(g *dag.Graph) float64 {
	var sum float64
	for i := 0; i < g.NumOps(); i++ {
		c := g.Cost(i)
		sum += c.FwdFLOPs + c.BwdInputFLOPs + c.BwdWeightFLOPs
	}
	return sum
}

// torchtitan's published figure for Llama 3.1 8B on 8 H100 in bf16 (FSDP,
// no torch.compile), quoted, not measured here.
const torchtitanTokensPerGPU = 5762

// PrecisionSection plans the 6.6B GPT-shaped transformer on 8 and 64 h100
// (8 a node) in each precision: predicted tokens per second per GPU and
// model FLOPs utilisation against the h100's dense bf16 peak (989 TFLOP/s,
// the figure MFU is quoted against), beside torchtitan's published figure.
func PrecisionSection(c Config) (*Section, error) {
	g, err := GPT7B()
	if err != nil {
		return nil, err
	}
	dev := plan.Profiles["h100"]
	peak, _ := dev.Peak("bf16")
	fps := flopsPerSample(g)
	seq := float64(g.Inputs()[0].Shape[0])
	s := &Section{Name: "precision", Title: "Precision in the plan: the 6.6B GPT-shaped transformer on h100 (predicted)",
		Intro: fmt.Sprintf("models export transformer --layers 32 --hidden 4096 --ffn 16384 --seq 2048 --heads 32 --vocab 32000 --batch 512 "+
			"(%.3g billion parameters, %.4g TFLOP a sample forward and backward), searched with --device h100 --devices-per-node 8 "+
			"--precision P; tokens/s per GPU = samples/s × %g / devices; MFU = tokens/s per GPU × FLOPs per token / %.0f TFLOP/s "+
			"(the h100's dense bf16 rate, which MFU is quoted against in every precision).", float64(params(g))/1e9, fps/1e12, seq, peak/1e12),
		Columns: []string{"devices", "precision", "stages", "micro-batch", "iteration s", "samples/s", "tokens/s per GPU", "MFU", "peak GB", "over fp32"}}
	for _, devices := range []int{8, 64} {
		var base float64
		for _, prec := range plan.Precisions {
			c.Log("precision: the 6.6B transformer on %d h100 in %s", devices, prec)
			p, err := search.Search(g, search.Options{Device: dev, Devices: devices, DevicesPerNode: 8, Precision: prec})
			if err != nil {
				s.Rows = append(s.Rows, []string{fmt.Sprint(devices), prec, "none: " + err.Error(), "", "", "", "", "", "", ""})
				continue
			}
			tok := p.Predicted.SamplesPerS * seq / float64(devices)
			if prec == "fp32" {
				base = p.Predicted.SamplesPerS
			}
			over := "-"
			if base > 0 {
				over = fmt.Sprintf("%.2f", p.Predicted.SamplesPerS/base)
			}
			s.Rows = append(s.Rows, []string{fmt.Sprint(devices), prec, fmt.Sprint(len(p.Stages)), fmt.Sprint(p.MicroBatch),
				f(p.Predicted.IterationS), f(p.Predicted.SamplesPerS), fmt.Sprintf("%.0f", tok), fmt.Sprintf("%.3f", tok*fps/seq/peak),
				fmt.Sprintf("%.1f", float64(p.Predicted.PeakMemory)/1e9), over})
		}
	}
	s.Notes = append(s.Notes, fmt.Sprintf("Published, not measured here: torchtitan's Llama 3.1 8B on 8 H100 in bf16 (FSDP, no torch.compile), %d tokens/s per GPU, "+
		"33-39%% model FLOPs utilisation. The rows above are the planner's predictions from the h100 profile's datasheet rates and its "+
		"efficiency curve (large products at up to 0.81 of peak, every op priced alone), not measurements: no GPU has run this model "+
		"here. Where they exceed what frameworks measure, the profile is the optimist: graphpipe profile on an H100 fits the curve "+
		"to its own GEMM sweep in each precision, and bench/gpu/bf16.sh measures a GPT-style model's MFU against its prediction.", torchtitanTokensPerGPU))
	return s, nil
}
