package microbatch

import (
	"bytes"
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
	steps := int(math.Round(res.End())) // a schedule without a flush plays several iterations
	cells := make([][]string, steps)
	for i := range cells {
		cells[i] = make([]string, sch.Pipe.Stages)
		for s := range cells[i] {
			cells[i][s] = "."
		}
	}
	for _, e := range res.Events {
		if e.Compute() {
			cells[int(math.Round(e.Start))][e.Stage] = fmt.Sprintf("%d%c%d", e.Stage, e.Kind, e.MB)
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s, %d stages, %d micro-batches; cell = <stage><F|B|W><micro-batch>\n", sch.Name, sch.Pipe.Stages, sch.Pipe.MicroBatches)
	if sch.NoFlush {
		fmt.Fprintf(&b, "# no flush: %d iterations back to back, iteration i's micro-batch j as i·%d+j; a stage updates after its batch's last B\n", twoBWIters, sch.Pipe.MicroBatches)
	}
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
