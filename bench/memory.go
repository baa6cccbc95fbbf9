package bench

import (
	"fmt"
	"strings"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/search"
)

// gptSize is one rung of the GPT-shaped ladder the memory section climbs:
// the GPT-3 paper's shapes, then Megatron-Turing NLG's (530B) and a
// trillion (FFN 4 × hidden, heads of 128), sequence 2048, vocabulary 32000.
type gptSize struct {
	name           string
	layers, hidden int64
}

var gptLadder = []gptSize{
	{"1.3B", 24, 2048}, {"2.7B", 32, 2560}, {"6.7B", 32, 4096}, {"13B", 40, 5120},
	{"30B", 48, 7168}, {"65B", 80, 8192}, {"175B", 96, 12288}, {"530B", 105, 20480}, {"1T", 128, 25600},
}

// gptGraph builds a rung of the ladder at batch.
func gptGraph(s gptSize, batch int64) (*dag.Graph, error) {
	e, err := models.Lookup("transformer")
	if err != nil {
		return nil, err
	}
	c := e.Default
	for k, v := range map[string]int64{"layers": s.layers, "hidden": s.hidden, "ffn": 4 * s.hidden, "heads": s.hidden / 128,
		"seq": 2048, "vocab": 32000, "batch": batch} {
		c.Set(k, v)
	}
	return e.Build(c)
}

// params is g's parameter count.
func params(g *dag.Graph) int64 { return g.Total().Params }

// MemorySection: the largest GPT-shaped model of the ladder that plans on 1,
// 8 and 64 h100 at each --optimizer-state, and the largest whose plan
// graphpipe run can train (no weight streaming).
func MemorySection(c Config) (*Section, error) {
	const batch = 512
	s := &Section{Name: "memory", Title: "Models bigger than their devices: the largest GPT-shaped model that plans, by where the optimizer state lives (simulated h100, bf16)",
		Intro: "`graphpipe search` (gpp, 1f1b, recompute auto, Adam, --precision bf16) on h100 (80 GB, 8 per node), the model " +
			"`graphpipe models export transformer --layers L --hidden H --ffn 4H --heads H/128 --seq 2048 --vocab 32000 --batch 512` " +
			"for the GPT-3 paper's shapes, then Megatron-Turing NLG's (530B) and a trillion (128 layers, hidden 25600), climbed from the smallest until one does not plan (no larger one is tried), once with " +
			"weight streaming allowed (search's default) and once without (what a run searches: graphpipe run does not stream weights). " +
			"replicated: every replica holds its stage's whole optimizer state; sharded: ZeRO-1 across a stage's replicas; host: every " +
			"stage's master weights and optimizer state in host memory, stepped on the host (streaming the weights where even they do " +
			"not fit, when allowed); auto (the default): sharded where a stage has replicas, spilled to host memory where only that fits. " +
			"Params is the model's parameter count; samples/s and b, stages are the largest model's plan; \"none\": not even the smallest plans.",
		Columns: []string{"devices", "--optimizer-state", "largest that plans", "params", "samples/s", "b, stages", "stages streaming",
			"largest without streaming", "params", "samples/s", "b, stages"}}
	ladder := gptLadder
	if c.Quick {
		ladder = gptLadder[:4]
	}
	graphs := make([]*dag.Graph, len(ladder))
	for i, size := range ladder {
		g, err := gptGraph(size, batch)
		if err != nil {
			return nil, err
		}
		graphs[i] = g
	}
	for _, devices := range []int{1, 8, 64} {
		for _, state := range []string{plan.StateReplicated, plan.StateSharded, plan.StateHost, search.StateAuto} {
			row := []string{fmt.Sprint(devices), state}
			for _, noStream := range []bool{false, true} {
				o := search.Options{Device: plan.Profiles["h100"], Devices: devices, DevicesPerNode: 8, Precision: "bf16",
					OptimizerState: state, NoStreaming: noStream}
				at, p := -1, (*plan.Plan)(nil)
				for i, g := range graphs {
					c.Log("memory: %s on %d h100, %s, streaming %v", ladder[i].name, devices, state, !noStream)
					q, err := search.Search(g, o)
					if err != nil || !q.Predicted.Feasible {
						break
					}
					at, p = i, q
				}
				if at < 0 {
					row = append(row, "none", "-", "-", "-")
				} else {
					row = append(row, ladder[at].name, fmt.Sprintf("%.3g B", float64(params(graphs[at]))/1e9), f(p.Predicted.SamplesPerS),
						fmt.Sprintf("%d, %d", p.MicroBatch, len(p.Stages)))
				}
				if !noStream {
					row = append(row, streaming(p))
				}
			}
			s.Rows = append(s.Rows, row)
		}
	}
	return s, throughputNote(c, s, graphs[2], ladder[2].name)
}

// throughputNote adds a note on what each placement makes of one rung (g,
// named name) on 8 and 64 h100: samples/s and the stages placed each way.
func throughputNote(c Config, s *Section, g *dag.Graph, name string) error {
	for _, devices := range []int{8, 64} {
		var parts []string
		for _, state := range []string{plan.StateReplicated, plan.StateSharded, plan.StateHost, search.StateAuto} {
			c.Log("memory: %s on %d h100, %s, throughput", name, devices, state)
			p, err := search.Search(g, search.Options{Device: plan.Profiles["h100"], Devices: devices, DevicesPerNode: 8, Precision: "bf16", OptimizerState: state})
			if err != nil {
				parts = append(parts, state+": none")
				continue
			}
			parts = append(parts, fmt.Sprintf("%s %s samples/s (%d stages: %s; micro-batch %d, peak %.3g GB)", state, f(p.Predicted.SamplesPerS),
				len(p.Stages), placements(p), p.MicroBatch, float64(p.Predicted.PeakMemory)/1e9))
		}
		s.Notes = append(s.Notes, fmt.Sprintf("Where the state lives also changes what fits beside it: the %s model on %d h100: %s.", name, devices, strings.Join(parts, "; ")))
	}
	return nil
}

// placements counts p's stages by placement: "2 sharded, 1 replicated".
func placements(p *plan.Plan) string {
	var out []string
	for _, state := range plan.StatePlacements {
		n := 0
		for _, st := range p.Stages {
			if st.StateName() == state {
				n++
			}
		}
		if n > 0 {
			out = append(out, fmt.Sprintf("%d %s", n, state))
		}
	}
	return strings.Join(out, ", ")
}

// streaming counts p's stages that stream their weights ("-" without a plan).
func streaming(p *plan.Plan) string {
	if p == nil {
		return "-"
	}
	n := 0
	for _, st := range p.Stages {
		if st.StreamWeights {
			n++
		}
	}
	return fmt.Sprintf("%d of %d", n, len(p.Stages))
}
