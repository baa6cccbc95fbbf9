package profile

import (
	"encoding/json"
	"fmt"
	"time"
)

// probeReport is what an echo answers the iterations probe with: a JSON
// document shaped as a run's worker reports to its coordinator (runtime's
// Report: the stage's loss and seconds, its timeline of actions, its
// links' times) and about reportBytes long, which the measuring process
// decodes as a coordinator decodes each report. Came is when the go came,
// on the host's clock.
type probeReport struct {
	Stage  int          `json:"stage"`
	Iter   int64        `json:"iter"`
	Loss   float64      `json:"loss"`
	Secs   float64      `json:"seconds"`
	Came   int64        `json:"came_ns"`
	Events []probeEvent `json:"events"`
	Links  []probeLink  `json:"links"`
}

type probeEvent struct {
	Kind  byte    `json:"kind"`
	MB    int     `json:"mb"`
	Start float64 `json:"start"`
	End   float64 `json:"end"`
	Edge  int     `json:"edge,omitempty"`
	Dir   byte    `json:"dir,omitempty"`
}

type probeLink struct {
	Edge int     `json:"edge"`
	Dir  byte    `json:"dir"`
	Secs float64 `json:"seconds"`
}

// reportEvents and reportLinks make a probe report about reportBytes long.
const reportEvents, reportLinks = 16, 4

// newProbeReport is stage id's report of round i, its go come at came.
func newProbeReport(id int32, i int64, came time.Time) ([]byte, error) {
	r := probeReport{Stage: int(id), Iter: i, Loss: 2.302585, Secs: 0.001234567, Came: came.UnixNano()}
	for j := range reportEvents {
		at := float64(j) * 1.234567e-4
		r.Events = append(r.Events, probeEvent{Kind: "FBSR"[j%4], MB: j / 4, Start: at, End: at + 0.987654e-4, Edge: j % 3, Dir: "ag"[j%2]})
	}
	for j := range reportLinks {
		r.Links = append(r.Links, probeLink{Edge: j, Dir: "ag"[j%2], Secs: 1.234567e-4})
	}
	return json.Marshal(r)
}

// cameOf decodes a probe report and says when its go came, in seconds
// after start.
func cameOf(b []byte, start time.Time) (float64, error) {
	var r probeReport
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, fmt.Errorf("profile: a probe's report: %v", err)
	}
	return float64(r.Came-start.UnixNano()) / 1e9, nil
}
