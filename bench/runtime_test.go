package bench

import (
	"fmt"
	"testing"

	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/profile"
	"github.com/graphpipe/graphpipe/search"
	"github.com/graphpipe/graphpipe/stage"
)

// BenchmarkEmulated runs the paper's MMT planned for 16 v100s, gpp and spp,
// with emulated devices (every op waits its modelled time, every transfer is
// delivered at its modelled time) and workers in this process over an
// embedded NATS server; it reports the measured median iteration against the
// simulator's, and the measured gpp/spp ratio against the simulated one.
func BenchmarkEmulated(b *testing.B) {
	g, err := Paper("mmt")
	if err != nil {
		b.Fatal(err)
	}
	measured, predicted := map[string]float64{}, map[string]float64{}
	for _, strategy := range []string{"gpp", "spp"} {
		plan, err := search.Search(g, search.Options{Device: plan.Profiles["v100"], Devices: 16, Strategy: strategy})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(strategy, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				m, err := Emulated(g, plan, 5)
				if err != nil {
					b.Fatal(err)
				}
				measured[strategy], predicted[strategy] = m, plan.Predicted.IterationS
			}
			b.ReportMetric(measured[strategy], "measured-s/iter")
			b.ReportMetric(predicted[strategy], "simulated-s/iter")
			b.ReportMetric(measured[strategy]/predicted[strategy], "measured/simulated")
		})
	}
	b.Logf("gpp/spp: measured %.3f, simulated %.3f", measured["spp"]/measured["gpp"], predicted["spp"]/predicted["gpp"])
}

// BenchmarkTransport compares activation traffic through two endpoints (the
// links workers use: chunks, a window, acknowledgements) with a raw NATS
// publish→subscribe of the same message sizes through the same embedded
// server, in the same run.
func BenchmarkTransport(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20, 8 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			var links, raw float64
			var err error
			for i := 0; i < b.N; i++ {
				if links, raw, err = profile.Transport(size); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(raw/(1<<20), "raw-MiB/s")
			b.ReportMetric(links/(1<<20), "links-MiB/s")
			b.ReportMetric(links/raw, "links/raw")
		})
	}
}

// BenchmarkCPURun trains a 2-branch model on this machine for real: a gpp
// plan on 2 CPU devices run by 2 workers in this process over an embedded
// NATS server, against graphpipe train's single process (whose matrix
// products already use every core), in the same run.
func BenchmarkCPURun(b *testing.B) {
	g, err := TwoBranch()
	if err != nil {
		b.Fatal(err)
	}
	plan, err := search.Search(g, search.Options{Device: plan.Profiles["cpu"], Devices: 2, MicroBatch: 32})
	if err != nil {
		b.Fatal(err)
	}
	var pipe, single, iter float64
	for i := 0; i < b.N; i++ {
		if pipe, single, iter, err = CPURun(g, plan, 12, stage.TrainOptions{Optimizer: "sgd", LR: 0.01}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(pipe, "pipeline-samples/s")
	b.ReportMetric(single, "single-samples/s")
	b.ReportMetric(pipe/single, "speedup")
	b.ReportMetric(iter/plan.Predicted.IterationS, "measured/simulated")
}
