package plan

import (
	"bytes"
	"fmt"
	"strings"
)

// stageLabel names a stage by its op range.
func (p *Plan) stageLabel(s int) string {
	st := p.Stages[s]
	if len(st.Ops) == 1 {
		return st.Ops[0]
	}
	return fmt.Sprintf("%s .. %s (%d ops)", st.Ops[0], st.Ops[len(st.Ops)-1], len(st.Ops))
}

// DOT renders the stage DAG in Graphviz's language.
func (p *Plan) DOT() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "digraph %q {\n  rankdir=LR;\n  node [shape=box, fontname=\"monospace\"];\n", p.Model.Name+" "+p.Strategy)
	for s, st := range p.Stages {
		label := fmt.Sprintf("stage %d: %s\ndevices %s, %d in flight", s, p.stageLabel(s), DeviceList(st.Devices), st.InFlight)
		if st.Recompute {
			label += ", recomputes"
		}
		fmt.Fprintf(&b, "  s%d [label=%q];\n", s, label)
	}
	for _, e := range p.Edges {
		fmt.Fprintf(&b, "  s%d -> s%d [label=%q];\n", e.From, e.To, fmt.Sprintf("%d tensor(s), %s/sample", len(e.Tensors), bytesText(e.Bytes)))
	}
	b.WriteString("}\n")
	return b.Bytes()
}

func bytesText(n int64) string {
	v := float64(n)
	for _, u := range []struct {
		s   float64
		sym string
	}{{1e9, "GB"}, {1e6, "MB"}, {1e3, "kB"}} {
		if v >= u.s {
			return fmt.Sprintf("%.3g %s", v/u.s, u.sym)
		}
	}
	return fmt.Sprintf("%d B", n)
}

// SVG draws the stage DAG: one column per distance from the sources, stages
// stacked in each column, edges as lines.
func (p *Plan) SVG() []byte {
	n := len(p.Stages)
	level := make([]int, n)
	for s := 0; s < n; s++ { // stages are numbered topologically
		for _, e := range p.Edges {
			if e.To == s {
				level[s] = max(level[s], level[e.From]+1)
			}
		}
	}
	const w, h, gapX, gapY, pad = 220.0, 46.0, 60.0, 16.0, 20.0
	row := map[int]int{}
	x, y := make([]float64, n), make([]float64, n)
	cols, rows := 0, 0
	for s := 0; s < n; s++ {
		x[s] = pad + float64(level[s])*(w+gapX)
		y[s] = pad + 20 + float64(row[level[s]])*(h+gapY)
		row[level[s]]++
		cols, rows = max(cols, level[s]+1), max(rows, row[level[s]])
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="monospace" font-size="10">`+"\n",
		2*pad+float64(cols)*(w+gapX), 2*pad+20+float64(rows)*(h+gapY))
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="12">%s: %s plan, %d stages, depth %d</text>`+"\n", pad, pad, escape(p.Model.Name), p.Strategy, n, p.Predicted.Depth)
	for _, e := range p.Edges {
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#888"/>`+"\n", x[e.From]+w, y[e.From]+h/2, x[e.To], y[e.To]+h/2)
	}
	for s, st := range p.Stages {
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" rx="4" fill="#e8eef7" stroke="#4e79a7"/>`+"\n", x[s], y[s], w, h)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">stage %d · devices %s</text>`+"\n", x[s]+6, y[s]+15, s, DeviceList(st.Devices))
		label := p.stageLabel(s)
		if len(label) > 34 {
			label = label[:33] + "…"
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%s</text>`+"\n", x[s]+6, y[s]+30, escape(label))
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// StageNames names each stage with its devices, as timelines and traces
// label it: "stage 2 (devices 4-7)", "stage 3 (device 8)".
func (p *Plan) StageNames() []string {
	names := make([]string, len(p.Stages))
	for i, s := range p.Stages {
		what := "devices"
		if len(s.Devices) == 1 {
			what = "device"
		}
		names[i] = fmt.Sprintf("stage %d (%s %s)", i, what, DeviceList(s.Devices))
		if s.Recompute {
			names[i] = fmt.Sprintf("stage %d (%s %s, recomputes)", i, what, DeviceList(s.Devices))
		}
	}
	return names
}

// DeviceList renders ascending device ids as runs: "0-2,7,9-10".
func DeviceList(d []int) string {
	var parts []string
	for i := 0; i < len(d); {
		j := i
		for j+1 < len(d) && d[j+1] == d[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, fmt.Sprint(d[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", d[i], d[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
