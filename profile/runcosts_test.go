package profile

import (
	"math"
	"testing"
)

// TestMeasureRunCosts: a quick measurement, with worker processes of its
// own (this binary calls Child in TestMain) and as goroutines, gives every
// run cost a CPU run pays: the NATS path's bandwidth fitted to its probe
// and its latency a join of two's, a message's one-way time in joins of 2
// and 3 workers, a slowdown of 1 for one worker and one figure per worker
// count, and the fixed cost of an iteration timed for each worker count.
func TestMeasureRunCosts(t *testing.T) {
	for _, inProcess := range []bool{false, true} {
		name := map[bool]string{false: "processes", true: "goroutines"}[inProcess]
		t.Run(name, func(t *testing.T) {
			if inProcess {
				childCapable.Store(false)
				defer childCapable.Store(true)
			}
			rc, res, err := MeasureRunCosts(RunCostsPlan{Cores: 2, CPU: true, Quick: true})
			if err != nil {
				t.Fatal(err)
			}
			if res.InProcess != inProcess {
				t.Errorf("in process %v, want %v", res.InProcess, inProcess)
			}
			for _, f := range []struct {
				name string
				v    float64
			}{{"nats_lat_s", rc.NATSLat}, {"nats_bw", rc.NATSBW}, {"allreduce_bw", rc.RingBW}, {"send_s + send_bw", rc.SendS + rc.SendBW},
				{"recv_s + recv_bw", rc.RecvS + rc.RecvBW}, {"go_s + go_worker_s", rc.GoS + rc.GoWorkerS}, {"report_s + report_worker_s", rc.ReportS + rc.ReportWorkerS}} {
				if !(f.v > 0) {
					t.Errorf("%s: %g, want a positive figure", f.name, f.v)
				}
			}
			_, bw := fitLinkAnyway(samples(res.LinkSizes, res.OneWay))
			lat := max(0, res.JoinS[0]-float64(joinMsgBytes)/bw)
			if math.Abs(lat-rc.NATSLat) > 1e-15 || bw != rc.NATSBW {
				t.Errorf("NATS path %g s + bytes / %g B/s, its probe fits the bandwidth %g and a join of two the latency %g", rc.NATSLat, rc.NATSBW, bw, lat)
			}
			ks, _, _ := busyPlan(2, true)
			s := rc.CoreSlowdown.Values()
			if len(s) != ks || s[0] != 1 || len(res.BusyS) != ks {
				t.Errorf("slowdown %v and busy times %v for %d worker counts", s, res.BusyS, ks)
			}
			jk, _ := joinWorkers(2, true)
			j := rc.NATSJoinS.Values()
			if len(j) != jk[len(jk)-1] || len(res.JoinS) != len(jk) || j[0] != j[1] {
				t.Errorf("joins of %v workers timed %v, profiled %v", res.JoinWorkers, res.JoinS, j)
			}
			for k, v := range j {
				if !(v > 0) {
					t.Errorf("a join of %d workers: %g s one way, want a positive time", k+1, v)
				}
			}
			if n, _ := iterationWorkers(2, true); len(res.ReportS) != n || len(res.GoS) != n || rc.HostCores != 2 {
				t.Errorf("iterations timed for %v workers, %d host cores", res.IterWorkers, rc.HostCores)
			}
			t.Logf("NATS %.3g µs + bytes / %.3g GB/s; send %.3g µs, receive %.3g µs; ring %.3g µs + bytes / %.3g GB/s; go %.3g µs + %.3g µs per worker, reports %.3g µs + %.3g µs per worker; slowdown %.3g",
				rc.NATSLat*1e6, rc.NATSBW/1e9, rc.SendS*1e6, rc.RecvS*1e6, rc.RingLat*1e6, rc.RingBW/1e9, rc.GoS*1e6, rc.GoWorkerS*1e6, rc.ReportS*1e6, rc.ReportWorkerS*1e6, s)
		})
	}
}

// TestFitAffine: the least-squares line, its slope kept from going
// negative.
func TestFitAffine(t *testing.T) {
	if a, b := fitAffine([]int{1, 2, 3}, []float64{3, 5, 7}); a != 1 || b != 2 {
		t.Errorf("3, 5, 7: %g + %g k, want 1 + 2 k", a, b)
	}
	if a, b := fitAffine([]int{1, 2, 3}, []float64{7, 5, 3}); b != 0 || a != 5 {
		t.Errorf("falling: %g + %g k, want 5 + 0 k", a, b)
	}
}

// TestMonotone: a slowdown list made never to fall nor to be below 1, the
// closest such in least squares.
func TestMonotone(t *testing.T) {
	for _, c := range []struct{ in, want []float64 }{
		{[]float64{1, 1.2, 1.8}, []float64{1, 1.2, 1.8}},
		{[]float64{1, 3.3, 1.5, 3.2}, []float64{1, 2.4, 2.4, 3.2}},
		{[]float64{1, 0.9, 1.6}, []float64{1, 1, 1.6}},
		{[]float64{1, 2, 1.5, 1}, []float64{1, 1.5, 1.5, 1.5}},
	} {
		got := monotone(c.in)
		for i := range got {
			if d := got[i] - c.want[i]; d > 1e-12 || d < -1e-12 {
				t.Errorf("%v: %v, want %v", c.in, got, c.want)
				break
			}
		}
	}
}

// TestFitLinkAnyway: times that grow with the bytes are fitted as FitLink
// fits them; times that do not (a busy machine) give the largest
// message's rate and the smallest one's time beyond it.
func TestFitLinkAnyway(t *testing.T) {
	lat, bw := fitLinkAnyway([]KernelSample{{1000, 2e-5}, {1e6, 1.01e-3}})
	if l, b, _ := FitLink([]KernelSample{{1000, 2e-5}, {1e6, 1.01e-3}}); lat != l || bw != b {
		t.Errorf("growing: %g + bytes/%g, FitLink %g + bytes/%g", lat, bw, l, b)
	}
	lat, bw = fitLinkAnyway([]KernelSample{{1000, 3e-3}, {1e6, 2e-3}})
	if bw != 5e8 || lat < 3e-3-2e-6-1e-12 || lat > 3e-3-2e-6+1e-12 {
		t.Errorf("falling: %g + bytes/%g, want 0.002998 + bytes/5e8", lat, bw)
	}
}

// TestTypical: the mean without the slowest tenth, so that one stall in
// ten samples moves nothing, and nothing is dropped from fewer than ten.
func TestTypical(t *testing.T) {
	for _, c := range []struct {
		name string
		xs   []float64
		want float64
	}{
		{"a stall left out", []float64{1, 1, 1, 100, 1, 1, 1, 1, 1, 1}, 1},
		{"the slowest tenth of twenty", []float64{20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, 9.5},
		{"fewer than ten: the mean", []float64{1, 2, 3, 10}, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := typical(c.xs); got != c.want {
				t.Errorf("typical(%v) = %g, want %g", c.xs, got, c.want)
			}
		})
	}
	if got := typical(nil); got == got {
		t.Errorf("typical of nothing = %g, want NaN", got)
	}
}
