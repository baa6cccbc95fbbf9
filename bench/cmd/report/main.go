// Command report runs the comparison benchmarks and writes BENCHMARKS.md and
// bench/results/ (CSV tables; charts as SVG and PNG). make bench runs it in full (at most
// an hour on a 2-core machine), make bench-quick a subset (a few minutes).
package main

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/graphpipe/graphpipe/bench"
)

func main() {
	quick := flag.Bool("quick", false, "run the quick subset")
	root := flag.String("root", ".", "where to write BENCHMARKS.md (and bench/results/)")
	only := flag.String("only", "", "run these sections alone (comma-separated: "+strings.Join(slices.Sorted(maps.Keys(cpuSections)), ", ")+
		"), print their Markdown and write their CSVs; BENCHMARKS.md is left as it is")
	flag.Parse()
	start := time.Now()
	c := bench.Config{Quick: *quick, Log: func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[%5.0fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}}
	if *only != "" {
		if err := runOnly(c, *root, strings.Split(*only, ",")); err != nil {
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
	sweep, sweepRows, err := bench.BatchSweep(c)
	if err != nil {
		return nil, err
	}
	head, err := bench.Headline(c, sweepRows)
	if err != nil {
		return nil, err
	}
	r.Sections = append(r.Sections, head...)
	paper, rows, err := bench.PaperSection(c)
	if err != nil {
		return nil, err
	}
	r.Sections = append(r.Sections, paper)
	scheds, err := bench.Schedules(c, rows)
	if err != nil {
		return nil, err
	}
	r.Sections = append(r.Sections, scheds, sweep)
	for _, f := range []func(bench.Config) (*bench.Section, error){bench.Ablation, bench.Controls, bench.OtherDevices, bench.Branches, bench.RecomputeSection} {
		s, err := f(c)
		if err != nil {
			return nil, err
		}
		r.Sections = append(r.Sections, s)
	}
	var at32 []bench.Row
	for _, row := range rows {
		if row.Devices == 32 {
			at32 = append(at32, row)
		}
	}
	r.Sections = append(r.Sections, bench.Ideal(at32))
	st, err := bench.SearchTime(c)
	if err != nil {
		return nil, err
	}
	r.Sections = append(r.Sections, st)
	rt, err := bench.Runtime(c)
	if err != nil {
		return nil, err
	}
	r.Sections = append(r.Sections, rt)
	for _, name := range []string{"sgemm", "cpu-training"} {
		s, err := cpuSections[name](c)
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

// cpuSections are the sections of the CPU's own speed, by name (-only).
var cpuSections = map[string]func(bench.Config) (*bench.Section, error){
	"sgemm":        bench.SgemmSection,
	"cpu-training": bench.CPUTraining,
}

// runOnly runs the named sections, prints their Markdown to stdout and
// writes their CSVs under root/bench/results.
func runOnly(c bench.Config, root string, names []string) error {
	for _, name := range names {
		f, ok := cpuSections[name]
		if !ok {
			return fmt.Errorf("-only %s: no such section (%s)", name, strings.Join(slices.Sorted(maps.Keys(cpuSections)), ", "))
		}
		s, err := f(c)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(root, "bench", "results", s.Name+".csv"), s.CSV(), 0o644); err != nil {
			return err
		}
		fmt.Print(s.Markdown())
	}
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
