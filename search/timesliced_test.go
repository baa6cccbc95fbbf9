package search

import (
	"math"
	"testing"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
)

// TestTimeSlicedGPU: MMT's small preset cut into pipelines of 2 and 3
// stages (forced by a memory limit one device cannot meet) whose workers
// share one GPU (the devices one node, the profile time-sliced) is priced
// at the GPU's total work: one GPU runs every stage's kernels in turn, so
// an iteration takes all of them back to back, no less (the oracle: the
// stages' busy time, the slowdown taken out, summed), and little more
// (the links and the coordinator's reports). The same search on separate
// GPUs, whose stages overlap, predicts less.
func TestTimeSlicedGPU(t *testing.T) {
	e, _ := models.Lookup("mmt")
	g, err := e.Build(e.Small)
	if err != nil {
		t.Fatal(err)
	}
	one, err := Search(g, Options{Device: plan.Profiles["h100"], Devices: 1, Recompute: "off"})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []int{2, 3} {
		o := Options{Devices: d, DevicesPerNode: d, Recompute: "off", MemoryLimit: one.Predicted.PeakMemory * 2 / 5, OptimizerState: plan.StateReplicated}
		o.Device = plan.Profiles["h100"].TimeSliced()
		p, err := Search(g, o)
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Simulate()
		if err != nil {
			t.Fatal(err)
		}
		work := 0.0
		for s, st := range p.Stages {
			w := res.Busy[s] * float64(len(st.Devices))
			if st.Slowdown > 0 {
				w /= st.Slowdown // the factor its times include
			}
			work += w
		}
		it := p.Predicted.IterationS
		if len(p.Stages) < 2 || it < work*(1-1e-9) || it > 1.1*work {
			t.Errorf("%d workers on one GPU: %d stages, %.4g s predicted, the GPU's work %.4g s", d, len(p.Stages), it, work)
		}
		o.Device = plan.Profiles["h100"]
		apart, err := Search(g, o)
		if err != nil {
			t.Fatal(err)
		}
		if apart.Predicted.IterationS >= it {
			t.Errorf("%d separate GPUs: %.4g s predicted, not less than one shared GPU's %.4g s", d, apart.Predicted.IterationS, it)
		}
		t.Logf("%d workers: %d stages at micro-batch %d, one GPU %.4g s (its work %.4g s, ×%.3g), separate GPUs %.4g s",
			d, len(p.Stages), p.MicroBatch, it, work, p.Slowdown, apart.Predicted.IterationS)
	}
}

// TestTimeSlicedGPUFloor: whatever plan the search makes for workers that
// share one GPU (stages, replicas, placements, micro-batches), it is
// predicted no faster than the whole model on that GPU alone at the
// largest per-device micro-batch the plan uses (a smaller one is no
// cheaper per sample): the GPU does all of the work either way. A stage's
// time scaled again for each placement tried, or left at the DP's
// all-busy price, breaks it.
func TestTimeSlicedGPUFloor(t *testing.T) {
	for _, name := range []string{"mmt", "dlrm", "candle-uno"} {
		e, _ := models.Lookup(name)
		g, err := e.Build(e.Small)
		if err != nil {
			t.Fatal(err)
		}
		dev := plan.Profiles["h100"]
		whole := func(m int64) float64 {
			p, err := Search(g, Options{Device: dev, Devices: 1, MicroBatch: m, Recompute: "off"})
			if err != nil {
				t.Fatal(err)
			}
			st := p.Stages[0]
			return (st.ForwardS + st.BackwardS + st.WeightS) * float64(p.MicroBatches)
		}
		peak := int64(0)
		if p, err := Search(g, Options{Device: dev, Devices: 1, Recompute: "off"}); err == nil {
			peak = p.Predicted.PeakMemory
		} else {
			t.Fatal(err)
		}
		for _, d := range []int{2, 3, 4} {
			for _, frac := range []float64{0, 0.75, 0.5, 0.4} {
				o := Options{Device: dev.TimeSliced(), Devices: d, DevicesPerNode: d, Recompute: "off", MemoryLimit: int64(frac * float64(peak))}
				p, err := Search(g, o)
				if err != nil {
					continue // no plan fits that memory
				}
				m := int64(0)
				for _, st := range p.Stages {
					m = max(m, st.MicroBatch)
				}
				if floor := whole(m); p.Predicted.IterationS < floor*(1-1e-9) {
					t.Errorf("%s on %d workers sharing a GPU (memory %.2g of one's peak): %d stages, %.4g s predicted, under the GPU's work alone at micro-batch %d, %.4g s",
						name, d, frac, len(p.Stages), p.Predicted.IterationS, m, floor)
				}
			}
		}
	}
}

// TestEdgeTransportAsRun: an edge is priced by the transport the run will
// give it: device to device only where its tensors may go so
// (plan.IPCTensors); a sequential pipeline's edges that pass tensors on
// to later stages go over NATS, priced at NATS's link.
func TestEdgeTransportAsRun(t *testing.T) {
	e, _ := models.Lookup("mmt")
	g, err := e.Build(e.Small)
	if err != nil {
		t.Fatal(err)
	}
	dev := plan.Profiles["h100"]
	dev.RunCosts = plan.RunCosts{NATSLat: 1e-4, NATSBW: 1e9, IPCLat: 2e-5, IPCBW: 1e11}
	one, err := Search(g, Options{Device: dev, Devices: 1, Recompute: "off"})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, strategy := range []string{"gpp", "spp"} {
		for _, d := range []int{2, 3, 4} {
			p, err := Search(g, Options{Strategy: strategy, Device: dev, Devices: d, DevicesPerNode: d, Recompute: "off", MemoryLimit: one.Predicted.PeakMemory * 2 / 5})
			if err != nil {
				continue
			}
			for i, pe := range p.Edges {
				want, lat, bw := plan.TransportNATS, dev.NATSLat, dev.NATSBW
				if p.IPCTensors(g, i) {
					want, lat, bw = plan.TransportIPC, dev.IPCLat, dev.IPCBW
				}
				kf, kt := len(p.Stages[pe.From].Devices), len(p.Stages[pe.To].Devices)
				m := ceilDiv(p.MicroBatch, int64(max(kf, kt)))
				price := lat + float64(max(ceilDiv(int64(kt), int64(kf)), ceilDiv(int64(kf), int64(kt))))*float64(pe.Bytes*m)/bw
				if pe.Transport != want || math.Abs(pe.Transfer-price) > 1e-9*price {
					t.Errorf("%s on %d: edge %d (%d to %d) priced %s at %.4g s, the run sends it %s: %.4g s", strategy, d, i, pe.From, pe.To, pe.Transport, pe.Transfer, want, price)
				}
				kinds[pe.Transport]++
			}
		}
	}
	if kinds[plan.TransportIPC] == 0 || kinds[plan.TransportNATS] == 0 {
		t.Errorf("edges by transport %v: want both kinds among these plans", kinds)
	}
}
