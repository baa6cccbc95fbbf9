package microbatch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"text/tabwriter"
)

// Grid renders a schedule as a step × stage grid: one row per step of a run
// where every compute action takes one step and transfers are free, one column
// per stage. A cell is <stage><F|B|W><micro-batch>, "." when the stage idles.
func Grid(sch *Schedule) (string, error) {
	res, err := Simulate(sch, Unit(sch.Pipe))
	if err != nil {
		return "", err
	}
	steps := int(math.Round(res.Iteration))
	cells := make([][]string, steps)
	for i := range cells {
		cells[i] = make([]string, sch.Pipe.Stages)
		for s := range cells[i] {
			cells[i][s] = "."
		}
	}
	for _, e := range res.Events {
		if e.Kind != Send {
			cells[int(math.Round(e.Start))][e.Stage] = fmt.Sprintf("%d%c%d", e.Stage, e.Kind, e.MB)
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s, %d stages, %d micro-batches; cell = <stage><F|B|W><micro-batch>\n", sch.Name, sch.Pipe.Stages, sch.Pipe.MicroBatches)
	w := tabwriter.NewWriter(&b, 0, 1, 1, ' ', 0)
	head := []string{"step"}
	for s := 0; s < sch.Pipe.Stages; s++ {
		head = append(head, fmt.Sprintf("s%d", s))
	}
	fmt.Fprintln(w, strings.Join(head, "\t"))
	for i, row := range cells {
		fmt.Fprintf(w, "%d\t%s\n", i, strings.Join(row, "\t"))
	}
	w.Flush()
	return b.String(), nil
}

// traceEvent is one Chrome trace event (the format Perfetto opens).
type traceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`
	Dur  float64        `json:"dur,omitempty"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// Trace renders a simulated (or measured) iteration as Chrome trace event
// JSON: process 1 holds one thread per stage, process 2 one per link.
// stageNames labels the stage threads (nil: "stage N").
func Trace(res *Result, stages int, stageNames []string) []byte {
	var evs []traceEvent
	meta := func(pid, tid int, name string) {
		evs = append(evs, traceEvent{Name: "thread_name", Ph: "M", Pid: pid, Tid: tid, Args: map[string]any{"name": name}})
	}
	evs = append(evs, traceEvent{Name: "process_name", Ph: "M", Pid: 1, Args: map[string]any{"name": "stages"}},
		traceEvent{Name: "process_name", Ph: "M", Pid: 2, Args: map[string]any{"name": "links"}})
	for s := 0; s < stages; s++ {
		name := fmt.Sprintf("stage %d", s)
		if stageNames != nil {
			name = stageNames[s]
		}
		meta(1, s, name)
	}
	links := map[int]bool{}
	for _, e := range res.Events {
		ev := traceEvent{Ph: "X", Ts: e.Start * 1e6, Dur: (e.End - e.Start) * 1e6, Args: map[string]any{"micro_batch": e.MB}}
		if e.Kind == Send {
			what := "activations"
			if e.Dir == Grad {
				what = "gradients"
			}
			ev.Name, ev.Cat, ev.Pid, ev.Tid = fmt.Sprintf("%s %d", what, e.MB), "transfer", 2, e.Edge
			if !links[e.Edge] {
				links[e.Edge] = true
				meta(2, e.Edge, fmt.Sprintf("edge %d", e.Edge))
			}
		} else {
			ev.Name, ev.Cat, ev.Pid, ev.Tid = fmt.Sprintf("%c%d", e.Kind, e.MB), kindName(e.Kind), 1, e.Stage
		}
		evs = append(evs, ev)
	}
	out, _ := json.MarshalIndent(map[string]any{"traceEvents": evs, "displayTimeUnit": "ms"}, "", " ")
	return out
}

func kindName(k Kind) string {
	switch k {
	case Forward:
		return "forward"
	case Backward:
		return "backward"
	case Weight:
		return "weight-gradient"
	}
	return "transfer"
}

var svgColor = map[Kind]string{Forward: "#4e79a7", Backward: "#59a14f", Weight: "#f28e2b"}

// SVG renders the compute events of an iteration as a timeline, one row per stage.
func SVG(res *Result, stages int, title string) []byte {
	const width, row, left, top = 1000.0, 22.0, 70.0, 30.0
	scale := (width - left - 10) / math.Max(res.Iteration, 1e-12)
	height := top + row*float64(stages) + 30
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="monospace" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%.0f" y="18">%s (iteration %.4g s, bubble %.1f%%)</text>`+"\n", left, xmlEscape(title), res.Iteration, 100*res.Bubble)
	for s := 0; s < stages; s++ {
		fmt.Fprintf(&b, `<text x="4" y="%.1f">stage %d</text>`+"\n", top+row*float64(s)+15, s)
	}
	for _, e := range res.Events {
		if e.Kind == Send {
			continue
		}
		x, w := left+e.Start*scale, math.Max((e.End-e.Start)*scale, 0.5)
		y := top + row*float64(e.Stage)
		fmt.Fprintf(&b, `<rect x="%.2f" y="%.1f" width="%.2f" height="%.0f" fill="%s" stroke="white" stroke-width="0.5"><title>%c%d %.4g–%.4g s</title></rect>`+"\n",
			x, y+2, w, row-4, svgColor[e.Kind], e.Kind, e.MB, e.Start, e.End)
		if w > 18 {
			fmt.Fprintf(&b, `<text x="%.2f" y="%.1f" fill="white">%c%d</text>`+"\n", x+2, y+15, e.Kind, e.MB)
		}
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">F forward  B backward  W weight gradient</text>`+"\n", left, height-8)
	b.WriteString("</svg>\n")
	return b.Bytes()
}

func xmlEscape(s string) string {
	var b bytes.Buffer
	for _, r := range s {
		switch r {
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
