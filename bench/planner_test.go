package bench

import (
	"fmt"
	"os"
	"testing"
)

var deviceCounts = []int{4, 8, 16, 32}

// BenchmarkPaper is the paper's evaluation, simulated on v100 (4 per node,
// 16 GB): gpp over spp per model and device count at the memory batch.
func BenchmarkPaper(b *testing.B) {
	var rows []Row
	for _, name := range []string{"mmt", "dlrm", "candle-uno", "transformer", "case-study"} {
		g, err := Paper(name)
		if err != nil {
			b.Fatal(err)
		}
		for _, d := range deviceCounts {
			batch := MemoryBatch(g, "v100", d)
			b.Run(fmt.Sprintf("%s/%d", name, d), func(b *testing.B) {
				var r Row
				for i := 0; i < b.N; i++ {
					r = Compare(g, "v100", d, batch, 0, false)
				}
				b.ReportMetric(r.Ratio(), "gpp/spp")
				b.ReportMetric(float64(batch), "batch")
				b.ReportMetric(r.GPP.SearchS, "gpp-search-s")
				rows = append(rows, r)
			})
		}
	}
	Table(os.Stdout, rows)
}

// BenchmarkSchedules is BenchmarkPaper's comparison at 32 devices with both
// planners on 1f1b-depth (PipeDream-Flush's warm-up) and on zb.
func BenchmarkSchedules(b *testing.B) {
	var rows []Row
	for _, sched := range []string{"1f1b-depth", "zb"} {
		for _, name := range []string{"mmt", "dlrm", "candle-uno", "transformer"} {
			g, err := Paper(name)
			if err != nil {
				b.Fatal(err)
			}
			batch := MemoryBatch(g, "v100", 32)
			b.Run(sched+"/"+name, func(b *testing.B) {
				var r Row
				for i := 0; i < b.N; i++ {
					r = CompareWith(g, "v100", 32, batch, 0, sched, false)
				}
				b.ReportMetric(r.Ratio(), "gpp/spp")
				rows = append(rows, r)
			})
		}
	}
	Table(os.Stdout, rows)
}

// BenchmarkAblation is the paper's ablation at 32 devices: one micro-batch
// size forced on both planners (parallel stages alone) beside the free choice.
func BenchmarkAblation(b *testing.B) {
	var rows []Row
	for _, name := range []string{"mmt", "dlrm", "candle-uno"} {
		g, err := Paper(name)
		if err != nil {
			b.Fatal(err)
		}
		batch := MemoryBatch(g, "v100", 32)
		free := Compare(g, "v100", 32, batch, 0, false)
		// force the sequential plan's own micro-batch on both
		forced := Compare(g, "v100", 32, batch, free.SPP.MicroBatch, false)
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
			}
			b.ReportMetric(forced.Ratio(), "forced-gpp/spp")
			b.ReportMetric(free.Ratio(), "free-gpp/spp")
		})
		rows = append(rows, forced, free)
	}
	Table(os.Stdout, rows)
}

// BenchmarkBatchSweep shows how the ratio depends on the batch at 32 devices.
func BenchmarkBatchSweep(b *testing.B) {
	var rows []Row
	for _, name := range []string{"mmt", "dlrm", "candle-uno"} {
		g, _ := Paper(name)
		top := MemoryBatch(g, "v100", 32)
		for batch := top / 64; batch <= top; batch *= 4 {
			if batch < 1 {
				continue
			}
			r := Compare(g, "v100", 32, batch, 0, false)
			b.Run(fmt.Sprintf("%s/%d", name, batch), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
				}
				b.ReportMetric(r.Ratio(), "gpp/spp")
			})
			rows = append(rows, r)
		}
	}
	Table(os.Stdout, rows)
}

// BenchmarkSearch times each planner on each paper model at 32 devices; the
// ratio is spp-exact's time over gpp's, when spp-exact finishes.
func BenchmarkSearch(b *testing.B) {
	var rows []Row
	for _, name := range []string{"mmt", "dlrm", "candle-uno", "transformer", "case-study"} {
		g, _ := Paper(name)
		batch := MemoryBatch(g, "v100", 32)
		var r Row
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				r = Compare(g, "v100", 32, batch, 0, true)
			}
			b.ReportMetric(r.GPP.SearchS, "gpp-s")
			b.ReportMetric(r.SPP.SearchS, "spp-s")
			if r.Exact.Err == "" {
				b.ReportMetric(r.Exact.SearchS, "spp-exact-s")
			}
		})
		rows = append(rows, r)
	}
	Table(os.Stdout, rows)
}
