package bench

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/runtime"
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

// BenchmarkTransport compares activation traffic through two endpoints (the
// links workers use: chunks, a window of 4, acknowledgements) with a raw NATS
// publish→subscribe of the same message sizes through the same embedded
// server, in the same run.
func BenchmarkTransport(b *testing.B) {
	srv, err := runtime.StartEmbedded(0)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	dial := func() *runtime.NATS {
		t, err := runtime.DialNATS(runtime.NATSOptions{URL: srv.URL(), Token: srv.Token})
		if err != nil {
			b.Fatal(err)
		}
		return t
	}
	for _, size := range []int{64 << 10, 1 << 20, 8 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			n := max(8, (256<<20)/size) // 256 MiB a side
			msg := make([]byte, size)
			raw := rawRate(b, dial(), dial(), msg, n)
			links := linkRate(b, dial(), dial(), msg, n)
			b.ReportMetric(raw/(1<<20), "raw-MiB/s")
			b.ReportMetric(links/(1<<20), "links-MiB/s")
			b.ReportMetric(links/raw, "links/raw")
		})
	}
}

// rawRate publishes n messages (chunked to the server's payload limit, as the
// links are) and times their arrival at a subscriber that holds everything.
func rawRate(b *testing.B, pub, sub *runtime.NATS, msg []byte, n int) float64 {
	defer pub.Close()
	defer sub.Close()
	chunk := pub.MaxPayload() - 256
	pieces := (len(msg) + chunk - 1) / chunk
	got := make(chan struct{}, n*pieces)
	unsub, err := sub.Subscribe("raw", func([]byte) { got <- struct{}{} })
	if err != nil {
		b.Fatal(err)
	}
	defer unsub()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	for i := 0; i < n; i++ {
		for c := 0; c < pieces; c++ {
			pub.Publish("raw", msg[c*chunk:min(len(msg), (c+1)*chunk)])
		}
	}
	timeout := time.After(time.Minute)
	for i := 0; i < n*pieces; i++ {
		select {
		case <-got:
		case <-timeout:
			b.Fatalf("raw NATS lost %d of %d messages", n*pieces-i, n*pieces)
		}
	}
	return float64(n*len(msg)) / time.Since(start).Seconds()
}

// linkRate sends n messages from one endpoint to another and times them.
func linkRate(b *testing.B, a, c *runtime.NATS, msg []byte, n int) float64 {
	defer a.Close()
	defer c.Close()
	from, err := runtime.NewEndpoint(a, "bench", 1, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer from.Close()
	to, err := runtime.NewEndpoint(c, "bench", 1, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer to.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	errs := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			if err := from.SendActivation(ctx, 1, 0, int32(i), msg); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	for i := 0; i < n; i++ {
		if _, err := to.ReceiveActivation(ctx, 0, int32(i)); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	return float64(n*len(msg)) / time.Since(start).Seconds()
}

// BenchmarkCPURun trains a 2-branch model on this machine for real: a gpp
// plan on 2 CPU devices run by 2 workers in this process over an embedded
// NATS server, against graphpipe train's single process (whose matrix
// products already use every core), in the same run.
func BenchmarkCPURun(b *testing.B) {
	g, err := models.Branchy(2, 4, 512)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := runtime.StartEmbedded(0)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	plan, err := search.Search(g, search.Options{Device: search.Profiles["cpu"], Devices: 2, MicroBatch: 32})
	if err != nil {
		b.Fatal(err)
	}
	const steps = 12
	o := stage.TrainOptions{Optimizer: "sgd", LR: 0.01, MicroBatch: 32}
	var pipe, single float64
	for i := 0; i < b.N; i++ {
		t, err := runtime.DialNATS(runtime.NATSOptions{URL: srv.URL(), Token: srv.Token})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if _, err := runtime.RunLocal(context.Background(), g, plan, t, fmt.Sprint("cpu-", i), steps, runtime.Options{Train: o}); err != nil {
			b.Fatal(err)
		}
		pipe = float64(steps) * float64(g.BatchSize()) / time.Since(start).Seconds()
		t.Close()
		tr, err := stage.NewTrainer(g, o)
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		for s := 0; s < steps; s++ {
			if _, _, err := tr.Step(s); err != nil {
				b.Fatal(err)
			}
		}
		single = float64(steps) * float64(g.BatchSize()) / time.Since(start).Seconds()
	}
	b.ReportMetric(pipe, "pipeline-samples/s")
	b.ReportMetric(single, "single-samples/s")
	b.ReportMetric(pipe/single, "speedup")
	b.Logf("plan: %d stages, depth %d, micro-batch %d", len(plan.Stages), plan.Predicted.Depth, plan.MicroBatch)
}
