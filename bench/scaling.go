package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// scalingLimit bounds one search of the scaling sweep: a point past it is
// reported as such, not waited for.
const scalingLimit = 10 * time.Minute

// ScalingSection sweeps the planner over the branches of DLRM and MMT (8 to
// 128) and the devices (16 to 256, a100: every point fits its memory),
// each search a process of its own (`graphpipe search`, gpp with spp
// inside, the default schedule and recomputation), and reports its search
// time (the plan's own account of it) and the process's peak resident
// memory, with the growth exponents fitted on log-log: in ops at each
// device count, and in devices at each branch count.
func ScalingSection(c Config) (*Section, error) {
	s := &Section{Name: "scaling", Title: "Planner scaling: DLRM and MMT, 8 to 128 branches on 16 to 256 a100",
		Intro: "`graphpipe models export MODEL --branches N`, then `graphpipe search M.json --devices D --device a100` (gpp, which runs spp's search too; " +
			"1f1b; recomputation auto), each search a process of its own. Search s is the plan's own account of the search (its search.seconds); " +
			"peak GB is the process's maximum resident set (VmHWM). Each search runs alone, but this machine's 2 cores are shared with other work. " +
			fmt.Sprintf("A search still running after %v is stopped and its row says so.", scalingLimit),
		Columns: []string{"model", "branches", "ops", "devices", "search s", "peak GB", "samples/s", "stages"}}
	branches, devices := []int{8, 16, 32, 64, 128}, []int{16, 32, 64, 128, 256}
	if c.Quick {
		branches, devices = []int{8, 16}, []int{16, 64}
	}
	dir, bin, err := graphpipeWorkdir("graphpipe-scaling-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	for _, model := range []string{"dlrm", "mmt"} {
		secs := map[[2]int]float64{} // (branches, devices) → search s
		peaks := map[[2]int]float64{}
		ops := map[int]int{}
		for _, b := range branches {
			path := filepath.Join(dir, fmt.Sprintf("%s-%d.json", model, b))
			if out, err := exec.Command(bin, "models", "export", model, "--branches", fmt.Sprint(b), "-o", path).CombinedOutput(); err != nil {
				return nil, fmt.Errorf("models export %s --branches %d: %v: %s", model, b, err, out)
			}
			for _, d := range devices {
				c.Log("scaling: %s, %d branches, %d a100", model, b, d)
				row, sum, peak, err := scalingPoint(bin, path, d)
				if err != nil {
					return nil, fmt.Errorf("%s with %d branches on %d a100: %w", model, b, d, err)
				}
				ops[b] = sum.Ops
				if sum.SearchS > 0 {
					secs[[2]int{b, d}], peaks[[2]int{b, d}] = sum.SearchS, float64(peak)/1e9
				}
				s.Rows = append(s.Rows, append([]string{model, fmt.Sprint(b)}, row...))
			}
		}
		s.Notes = append(s.Notes, scalingFits(model, branches, devices, ops, secs, peaks)...)
	}
	return s, nil
}

// searchSummary is what the sweep reads of `graphpipe search --json`.
type searchSummary struct {
	SearchS     float64 `json:"search_s"`
	SamplesPerS float64 `json:"samples_per_s"`
	Stages      int     `json:"stages"`
	Ops         int
}

// scalingPoint searches the model at path on d a100 in a process of its
// own, and returns its row (from "ops" on), its summary and peak memory.
func scalingPoint(bin, path string, d int) ([]string, searchSummary, int64, error) {
	var sum searchSummary
	ctx, cancel := context.WithTimeout(context.Background(), scalingLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "search", path, "--devices", fmt.Sprint(d), "--device", "a100", "--json")
	out, peak, err := childPeak(cmd)
	var m struct {
		Nodes []json.RawMessage `json:"ops"`
	}
	if data, rerr := os.ReadFile(path); rerr == nil && json.Unmarshal(data, &m) == nil {
		sum.Ops = len(m.Nodes)
	}
	switch {
	case ctx.Err() != nil:
		return []string{fmt.Sprint(sum.Ops), fmt.Sprint(d), fmt.Sprintf("over %v", scalingLimit), "-", "-", "-"}, sum, 0, nil
	case err != nil && strings.Contains(string(out), "no plan fits"):
		return []string{fmt.Sprint(sum.Ops), fmt.Sprint(d), "no plan fits", "-", "-", "-"}, sum, 0, nil
	case err != nil:
		return nil, sum, 0, fmt.Errorf("%v: %s", err, out)
	}
	if err := json.Unmarshal(firstLine(out), &sum); err != nil {
		return nil, sum, 0, fmt.Errorf("search --json: %v: %s", err, out)
	}
	return []string{fmt.Sprint(sum.Ops), fmt.Sprint(d), fmt.Sprintf("%.2f", sum.SearchS), fmt.Sprintf("%.3f", float64(peak)/1e9),
		fmt.Sprintf("%.4g", sum.SamplesPerS), fmt.Sprint(sum.Stages)}, sum, peak, nil
}

// firstLine is the output's first line (the JSON object; what follows is
// a child's other output).
func firstLine(out []byte) []byte {
	s := strings.TrimSpace(string(out))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return []byte(s)
}

// scalingFits fits the growth exponents of search time and peak memory:
// against ops at each device count (over the branch counts), against
// devices at each branch count, and their medians.
func scalingFits(model string, branches, devices []int, ops map[int]int, secs, peaks map[[2]int]float64) []string {
	var inOps, inDevs, memOps, memDevs []float64
	var perDev, perBranch []string
	for _, d := range devices {
		var x, y, m []float64
		for _, b := range branches {
			if v, ok := secs[[2]int{b, d}]; ok {
				x, y, m = append(x, float64(ops[b])), append(y, v), append(m, peaks[[2]int{b, d}])
			}
		}
		if len(x) >= 2 {
			e := slope(x, y)
			inOps, memOps = append(inOps, e), append(memOps, slope(x, m))
			perDev = append(perDev, fmt.Sprintf("%d: %.2f", d, e))
		}
	}
	for _, b := range branches {
		var x, y, m []float64
		for _, d := range devices {
			if v, ok := secs[[2]int{b, d}]; ok {
				x, y, m = append(x, float64(d)), append(y, v), append(m, peaks[[2]int{b, d}])
			}
		}
		if len(x) >= 2 {
			e := slope(x, y)
			inDevs, memDevs = append(inDevs, e), append(memDevs, slope(x, m))
			perBranch = append(perBranch, fmt.Sprintf("%d: %.2f", b, e))
		}
	}
	if len(inOps) == 0 || len(inDevs) == 0 {
		return []string{fmt.Sprintf("%s: too few points for a fit.", model)}
	}
	return []string{
		fmt.Sprintf("%s: search time grows as ops^%.2f and devices^%.2f (medians of the least-squares slopes on log-log; in ops at each device count %s; in devices at each branch count %s); peak memory as ops^%.2f and devices^%.2f.",
			model, medianOf(inOps), medianOf(inDevs), strings.Join(perDev, ", "), strings.Join(perBranch, ", "), medianOf(memOps), medianOf(memDevs)),
	}
}
