package search

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Encode renders a plan as indented JSON.
func (p *Plan) Encode() []byte {
	p.finish()
	out, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		panic(err) // a Plan always encodes
	}
	return append(out, '\n')
}

// DecodePlan reads a plan file strictly (unknown fields are refused) and
// checks that it is whole: format, stages, devices, edges, and action lists
// that form a valid schedule.
func DecodePlan(data []byte) (*Plan, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("not a plan: the file is empty")
	}
	var head struct {
		Format string `json:"format"`
	}
	if json.Unmarshal(data, &head) == nil && head.Format != "" && head.Format != PlanFormat {
		if strings.HasPrefix(head.Format, "graphpipe/model@") {
			return nil, fmt.Errorf("not a plan but a model file (%s): make a plan of it with graphpipe search MODEL -o PLAN", head.Format)
		}
		return nil, fmt.Errorf("format: is %q, want %q", head.Format, PlanFormat)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Plan
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("not a plan: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("not a plan: unexpected data after the closing brace")
	}
	if p.Format == "" {
		return nil, fmt.Errorf("format: required (%q): not a plan file", PlanFormat)
	}
	if p.Format != PlanFormat {
		return nil, fmt.Errorf("format: is %q, want %q", p.Format, PlanFormat)
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

func (p *Plan) validate() error {
	switch {
	case len(p.Stages) == 0:
		return fmt.Errorf("stages: a plan needs at least one stage")
	case len(p.Stages) > 1<<16:
		return fmt.Errorf("stages: %d stages is more than any plan has", len(p.Stages))
	case p.DevicesPerNode < 1:
		return fmt.Errorf("devices_per_node: must be positive")
	case p.BatchSize < 1 || p.MicroBatch < 1 || p.BatchSize%p.MicroBatch != 0 || int64(p.MicroBatches) != p.BatchSize/p.MicroBatch:
		return fmt.Errorf("batch_size, micro_batch, micro_batches: %d, %d and %d do not agree", p.BatchSize, p.MicroBatch, p.MicroBatches)
	case p.MicroBatches > MicroBatchLimit:
		return fmt.Errorf("micro_batches: %d is over the %d a plan may have", p.MicroBatches, MicroBatchLimit)
	case len(p.Actions) != len(p.Stages):
		return fmt.Errorf("actions: %d lists for %d stages", len(p.Actions), len(p.Stages))
	}
	if q := p.Search.Sequential; q != nil && !(q.SamplesPerS > 0 && q.IterationS > 0 && q.Stages > 0 && q.Depth > 0 && q.MicroBatch > 0) {
		return fmt.Errorf("search.sequential: samples_per_s, iteration_s, stages, depth and micro_batch must be positive")
	}
	used := map[int]int{}
	for i, s := range p.Stages {
		if s.ID != i {
			return fmt.Errorf("stages[%d]: id is %d", i, s.ID)
		}
		if len(s.Ops) == 0 || len(s.Devices) == 0 {
			return fmt.Errorf("stage %d: needs ops and devices", i)
		}
		for _, d := range s.Devices {
			if d < 0 || d >= p.Devices {
				return fmt.Errorf("stage %d: device %d is not one of the plan's %d", i, d, p.Devices)
			}
			if other, dup := used[d]; dup {
				return fmt.Errorf("stage %d: device %d is also stage %d's", i, d, other)
			}
			used[d] = i
		}
	}
	for i, e := range p.Edges {
		if e.From < 0 || e.From >= len(p.Stages) || e.To < 0 || e.To >= len(p.Stages) || e.From == e.To {
			return fmt.Errorf("edges[%d]: %d → %d is not an edge between two stages", i, e.From, e.To)
		}
	}
	total := 0
	for _, l := range p.Actions {
		total += len(l)
	}
	if total > 1<<24 {
		return fmt.Errorf("actions: %d actions is more than any plan has", total)
	}
	_, err := p.ScheduleOf()
	return err
}
