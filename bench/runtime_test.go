package bench

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/search"
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
	srv, err := runtime.StartEmbedded(0)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	measured, predicted := map[string]float64{}, map[string]float64{}
	for _, strategy := range []string{"gpp", "spp"} {
		plan, err := search.Search(g, search.Options{Device: search.Profiles["v100"], Devices: 16, Strategy: strategy})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(strategy, func(b *testing.B) {
			var iters []float64
			for i := 0; i < b.N; i++ {
				t, err := runtime.DialNATS(runtime.NATSOptions{URL: srv.URL(), Token: srv.Token})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				res, err := runtime.RunLocal(ctx, g, plan, t, fmt.Sprintf("emu-%s-%d", strategy, i), 5, runtime.Options{Emulate: true})
				cancel()
				t.Close()
				if err != nil {
					b.Fatal(err)
				}
				iters = append(iters, res.Iters[1:]...) // the first iteration warms the links
			}
			sort.Float64s(iters)
			measured[strategy], predicted[strategy] = iters[len(iters)/2], plan.Predicted.IterationS
			b.ReportMetric(measured[strategy], "measured-s/iter")
			b.ReportMetric(predicted[strategy], "simulated-s/iter")
			b.ReportMetric(measured[strategy]/predicted[strategy], "measured/simulated")
		})
	}
	b.Logf("gpp/spp: measured %.3f, simulated %.3f", measured["spp"]/measured["gpp"], predicted["spp"]/predicted["gpp"])
}
