package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Encode renders a plan as indented JSON.
func (p *Plan) Encode() []byte {
	p.FillActions()
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
	p, err := decodePlan(data)
	if err != nil {
		return nil, err
	}
	if err := p.checkOpCount(); err != nil {
		return nil, err
	}
	return p, nil
}

// decodePlan is DecodePlan but for the count of ops, which a check against
// the model does better (naming the op).
func decodePlan(data []byte) (*Plan, error) {
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
