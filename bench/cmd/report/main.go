// Command report runs the comparison benchmarks and writes BENCHMARKS.md and
// bench/results/ (CSV tables; charts as SVG and PNG). make bench runs it in full (at most
// an hour on a 2-core machine), make bench-quick a subset (a few minutes).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/graphpipe/graphpipe/bench"
)

func main() {
	quick := flag.Bool("quick", false, "run the quick subset")
	root := flag.String("root", ".", "where to write BENCHMARKS.md (and bench/results/)")
	only := flag.String("only", "", "run these sections alone (comma-separated: "+strings.Join(onlyNames(), ", ")+
		") and put them into the BENCHMARKS.md a full run wrote")
	flag.Parse()
	start := time.Now()
	c := bench.Config{Quick: *quick, Log: func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[%5.0fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}}
	if *only != "" {
		if err := runOnly(c, strings.Split(*only, ","), *root, *quick, start); err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(1)
		}
		return
	}
	r, err := build(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
	r.Stamp = stamp(*quick, time.Since(start))
	if err := r.Write(*root); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "wrote BENCHMARKS.md and bench/results/ in %.0f s\n", time.Since(start).Seconds())
}

func build(c bench.Config) (*bench.Report, error) {
	r := &bench.Report{}
	planned, err := planners(c)
	if err != nil {
		return nil, err
	}
	r.Sections = append(r.Sections, planned...)
	st, err := bench.SearchTime(c)
	if err != nil {
		return nil, err
	}
	r.Sections = append(r.Sections, st)
	sc, err := bench.ScalingSection(c)
	if err != nil {
		return nil, err
	}
	r.Sections = append(r.Sections, sc)
	rt, err := bench.Runtime(c)
	if err != nil {
		return nil, err
	}
	r.Sections = append(r.Sections, rt)
	for _, name := range []string{"sgemm", "cpu-training", "cpu-runs", "sweep", "selective-backprop", "pipedream-2bw", "pipedream-2bw-cpu"} {
		s, err := alone[name](c)
		if err != nil {
			return nil, err
		}
		r.Sections = append(r.Sections, s)
	}
	imp, err := bench.ImportSection(c)
	if err != nil {
		return nil, err
	}
	r.Sections = append(r.Sections, imp)
	data, err := bench.DataSection(c)
	if err != nil {
		return nil, err
	}
	r.Sections = append(r.Sections, data)
	calls, err := bench.DeviceCallsSection(c)
	if err != nil {
		return nil, err
	}
	r.Sections = append(r.Sections, calls)
	return r, nil
}

// planners are the sections the planners' simulations make, in their
// order: every figure a plan predicts at 32 v100 and beyond, the ideal
// bound and where each plan's time goes. Deterministic: -only planners
// brings them up to the planner as it is without the hour of measured
// runs.
func planners(c bench.Config) ([]*bench.Section, error) {
	var out []*bench.Section
	sweep, sweepRows, err := bench.BatchSweep(c)
	if err != nil {
		return nil, err
	}
	head, err := bench.Headline(c, sweepRows)
	if err != nil {
		return nil, err
	}
	out = append(out, head...)
	paper, rows, err := bench.PaperSection(c)
	if err != nil {
		return nil, err
	}
	out = append(out, paper)
	scheds, err := bench.Schedules(c, rows)
	if err != nil {
		return nil, err
	}
	out = append(out, scheds, sweep)
	for _, f := range []func(bench.Config) (*bench.Section, error){bench.Ablation, bench.Controls, bench.OtherDevices, bench.PrecisionSection, bench.Branches, bench.RecomputeSection, bench.MemorySection} {
		s, err := f(c)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	var at32 []bench.Row
	for _, row := range rows {
		if row.Devices == 32 {
			at32 = append(at32, row)
		}
	}
	out = append(out, bench.Ideal(at32))
	bd, err := bench.BreakdownSection(c)
	if err != nil {
		return nil, err
	}
	out = append(out, bd)
	return out, nil
}

// groups are the sets of sections report -only runs together, by name.
var groups = map[string]func(bench.Config) ([]*bench.Section, error){
	"planners": planners,
}

// alone are the sections report -only runs, by name.
var alone = map[string]func(bench.Config) (*bench.Section, error){
	"breakdown":          bench.BreakdownSection,
	"runtime":            bench.Runtime,
	"scaling":            bench.ScalingSection,
	"sgemm":              bench.SgemmSection,
	"cpu-training":       bench.CPUTraining,
	"cpu-runs":           bench.CPURuns,
	"device-calls":       bench.DeviceCallsSection,
	"precision":          bench.PrecisionSection,
	"sweep":              bench.SweepSection,
	"memory":             bench.MemorySection,
	"selective-backprop": bench.SelectiveSection,
	"pipedream-2bw":      bench.TwoBWSection,
	"pipedream-2bw-cpu":  bench.TwoBWCPUSection,
}

// runOnly runs the named sections and splices them into root's BENCHMARKS.md.
func runOnly(c bench.Config, names []string, root string, quick bool, start time.Time) error {
	r := &bench.Report{}
	for _, name := range names {
		if g, ok := groups[name]; ok {
			ss, err := g(c)
			if err != nil {
				return err
			}
			r.Sections = append(r.Sections, ss...)
			continue
		}
		f, ok := alone[name]
		if !ok {
			return fmt.Errorf("-only %s: no such section (%s)", name, strings.Join(onlyNames(), ", "))
		}
		s, err := f(c)
		if err != nil {
			return err
		}
		r.Sections = append(r.Sections, s)
	}
	r.Stamp = "This section: " + strings.TrimPrefix(stamp(quick, time.Since(start)), "Run: ")
	r.Stamp = strings.Replace(r.Stamp, "`make bench`", "`go run ./bench/cmd/report -only "+strings.Join(names, ",")+"`", 1)
	if err := r.Splice(root); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s into BENCHMARKS.md in %.0f s\n", strings.Join(names, ", "), time.Since(start).Seconds())
	return nil
}

// stamp names the machine, the commit and the date of the run.
func stamp(quick bool, took time.Duration) string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				cpu = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	commit := "unknown commit"
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
	}
	kind := "make bench"
	if quick {
		kind = "make bench-quick"
	}
	return fmt.Sprintf("Run: `%s`, %s, commit %s, on %s (%d cores), %s; it took %.0f s.",
		kind, time.Now().UTC().Format("2006-01-02 15:04 UTC"), commit, cpu, runtime.NumCPU(), runtime.Version(), took.Seconds())
}

// onlyNames are the names -only takes: the sections alone and the groups.
func onlyNames() []string {
	return slices.Sorted(func(yield func(string) bool) {
		for k := range alone {
			if !yield(k) {
				return
			}
		}
		for k := range groups {
			if !yield(k) {
				return
			}
		}
	})
}
