package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/graphpipe/graphpipe/chart"
	"github.com/graphpipe/graphpipe/internal/regular"
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/supervise"
)

func stageDevices(p *plan.Plan) []int {
	d := make([]int, len(p.Stages))
	for i, s := range p.Stages {
		d[i] = len(s.Devices)
	}
	return d
}

func planTitle(p *plan.Plan) string { return supervise.PlanTitle(p) }

// readMeasured reads a run's trace (graphpipe run --trace) of plan p and
// titles it.
func readMeasured(path string, p *plan.Plan) (string, *microbatch.Result, error) {
	data, err := regular.ReadFile(path)
	if err != nil {
		return "", nil, inputf("--measured %s: cannot read: %v", path, errors.Unwrap(err))
	}
	res, names, err := microbatch.ParseTrace(data)
	if err != nil {
		return "", nil, inputf("--measured %s: %v", path, err)
	}
	if len(names) > len(p.Stages) {
		return "", nil, inputf("--measured %s: the trace has %d stages, the plan %d: a trace of another plan", path, len(names), len(p.Stages))
	}
	for _, e := range res.Events {
		if e.MB >= p.MicroBatches || !e.Compute() && e.Edge >= len(p.Edges) {
			return "", nil, inputf("--measured %s: %v of micro-batch %d on edge %d: the plan has %d micro-batches and %d edges: a trace of another plan",
				path, kindWord(e.Kind), e.MB, e.Edge, p.MicroBatches, len(p.Edges))
		}
	}
	title := "measured (" + path + ")"
	for _, n := range names {
		if strings.Contains(n, " EMULATED ") {
			title = "measured, EMULATED (" + path + ")"
		}
	}
	return title, microbatch.Timeline(res.Events, len(p.Stages), stageDevices(p)), nil
}

func kindWord(k microbatch.Kind) string {
	return map[microbatch.Kind]string{microbatch.Forward: "a forward", microbatch.Backward: "a backward", microbatch.Weight: "a weight gradient",
		microbatch.Send: "a send", microbatch.Recv: "a receive"}[k]
}

// drawTimelines renders ts into a chart file in the format its name asks
// for (flag says which flag named it).
func drawTimelines(flag, path string, format chart.Format, ts ...chart.Timeline) ([]byte, error) {
	data, err := chart.Timelines(format, ts...)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return data, nil
}
