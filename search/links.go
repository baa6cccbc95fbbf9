package search

import (
	"math"

	"github.com/graphpipe/graphpipe/plan"
)

// link is how a run moves one stage edge's tensors on a device kind, and
// its price per message: lat + bytes/bw.
type link struct {
	transport string // plan.TransportIPC or plan.TransportNATS
	lat, bw   float64
}

// edgeLink is the link the run will use between two stages on devices d,
// on one node or not (inter): workers on one host whose devices can share
// memory (a GPU) copy device to device through an IPC handle, priced at
// the profile's measured IPC copy where it has one; otherwise the bytes go
// over NATS, priced at the profile's measured NATS path (across nodes, no
// faster than the link between them). A profile that measured neither
// prices as profiles always did: IntraLat/IntraBW inside a node,
// InterLat/InterBW between nodes.
func edgeLink(d plan.Device, inter bool) link {
	if !inter && d.IPCCapable() {
		if d.IPCBW > 0 {
			return link{plan.TransportIPC, d.IPCLat, d.IPCBW}
		}
		return link{plan.TransportIPC, d.IntraLat, d.IntraBW}
	}
	return natsLink(d, inter)
}

// natsLink is edgeLink for bytes over NATS: an edge between nodes, or one
// whose tensors cannot go device to device (plan.IPCTensors).
func natsLink(d plan.Device, inter bool) link {
	switch {
	case d.NATSBW > 0 && inter:
		return link{plan.TransportNATS, max(d.NATSLat, d.InterLat), min(d.NATSBW, d.InterBW)}
	case d.NATSBW > 0:
		return link{plan.TransportNATS, d.NATSLat, d.NATSBW}
	case inter:
		return link{plan.TransportNATS, d.InterLat, d.InterBW}
	}
	return link{plan.TransportNATS, d.IntraLat, d.IntraBW}
}

// time is one message of bytes over the link (none for no bytes).
func (l link) time(bytes float64) float64 {
	if bytes <= 0 {
		return 0
	}
	return l.lat + bytes/l.bw
}

// dpRing is the ring the DP prices a stage of k devices with: one ring,
// over the links between nodes where k is more than a node's. The plans
// are priced with the rings they will run (planRing: in two levels where
// their stages lie on whole nodes); a DP that priced its stages on whole
// nodes in two levels too found slower plans than this one (dlrm's and
// candle-uno's on 32 v100: bench/history.md): its cheaper rings tied
// bottlenecks that the simulator tells apart.
func (cm *costModel) dpRing(k int) ring {
	return flatRing(cm.dev, k, k > cm.perNode)
}

// planRing is stage s of p's ring as the run will run it
// (plan.RingLayout).
func (cm *costModel) planRing(p *plan.Plan, s int) ring {
	if n, l := p.RingLayout(s); n >= 2 {
		return twoLevel(cm.dev, n, l)
	}
	devs := p.Stages[s].Devices
	return flatRing(cm.dev, len(devs), spans(p, devs))
}

// ringLink is the link of one step of a stage's ring all-reduce on d: the
// profile's measured ring (across nodes, no faster than the link between
// them), or, unmeasured, the links as profiles always priced it.
func ringLink(d plan.Device, inter bool) (lat, bw float64) {
	switch {
	case d.RingBW > 0 && inter:
		return max(d.RingLat, d.InterLat), min(d.RingBW, d.InterBW)
	case d.RingBW > 0:
		return d.RingLat, d.RingBW
	case inter:
		return d.InterLat, d.InterBW
	}
	return d.IntraLat, d.IntraBW
}

// messageCPU is what a stage's boundary costs it per micro-batch in its own
// time on d: each side that carries bytes (in: the activations it takes
// and the gradients it sends back; out: the activations it sends and the
// gradients it takes) one send and one receive of its largest tensor. Zero
// where the profile measured no message costs.
func messageCPU(d plan.Device, inBytes, outBytes float64) float64 {
	t := 0.0
	for _, b := range []float64{inBytes, outBytes} {
		s, r := d.MessageCPU(b)
		t += s + r
	}
	return t
}

// shareRounds is how many times shareCores prices and simulates again.
const shareRounds = 4

// shareCores prices the sharing of each host's cores (or of a GPU
// time-sliced among its workers) by the workers busy on it at once, moment
// by moment, rather than by all of its workers busy all the time, which
// the DP assumes (costModel.slow): each stage's ops and optimizer step are
// slowed by the slowdown its passes meet in the simulated iteration
// (contention), priced and simulated again until that settles (a few
// rounds). Each stage records the factor its times include
// (PlanStage.Slowdown), p.Slowdown the largest, so that reshare can price
// the plan again once its schedule changed. Plans on profiles that
// measured no sharing are left as they are.
func shareCores(p *plan.Plan, in []stageIn, cm *costModel) error {
	if !sharesCores(in, cm) {
		return nil
	}
	applied := make([]float64, len(p.Stages)) // each stage's factor as priced
	for s := range applied {
		applied[s] = cm.kind(in[s].kind).slow
	}
	return settleShares(p, cm, applied, true)
}

// reshare prices p's sharing again (shareCores) after its schedule
// changed (tune runs stages further ahead: more of them busy at once),
// keeping its action lists; a plan that shares nothing is left as it is.
func reshare(p *plan.Plan, cm *costModel) error {
	if p.Slowdown == 0 {
		return nil
	}
	applied := make([]float64, len(p.Stages))
	for s, st := range p.Stages {
		applied[s] = st.Slowdown
	}
	return settleShares(p, cm, applied, false)
}

// settleShares is shareCores from stage times that include the factors
// applied; rebuild makes each round build the schedule again for the new
// times (else its lists are kept, and only simulated again).
func settleShares(p *plan.Plan, cm *costModel, applied []float64, rebuild bool) error {
	defer func() {
		p.Slowdown = 0
		for s, f := range applied {
			p.Stages[s].Slowdown = f
			p.Slowdown = max(p.Slowdown, f)
		}
	}()
	for round := 0; round < shareRounds; round++ {
		res, err := p.Simulate()
		if err != nil {
			return err
		}
		fs := contention(p, res, cm)
		changed := false
		worker := -1 // the last worker of stage s: ids go stage by stage
		for s := range p.Stages {
			st, f := &p.Stages[s], fs[s]
			worker += len(st.Devices)
			kc := cm.kind(p.KindOf(s))
			if math.Abs(f-applied[s]) <= 1e-9*f {
				continue
			}
			r := f / applied[s]
			st.ForwardS, st.BackwardS, st.WeightS = r*st.ForwardS, r*st.BackwardS, r*st.WeightS
			goes := kc.dev.GoDelay(worker) // its inputs' making is slowed, not the go
			st.BeginS = goes + r*(st.BeginS-goes)
			st.FlushS, st.BucketBytes = kc.planFlush(p, s, f)
			if st.GathersLate() { // the all-gather runs late: not in the flush
				st.FlushS = max(0, st.FlushS-kc.gatherS(p, s))
				st.GatherS, st.GatherBucketBytes = kc.gatherWait(p, s)
			}
			applied[s], changed = f, true
		}
		if !changed {
			break
		}
		if rebuild {
			if err := schedule(p); err != nil {
				return err
			}
		}
		if err := p.Predict(); err != nil {
			return err
		}
	}
	return nil
}

// sharesCores says whether some stage's profile measured the sharing of
// its host's cores.
func sharesCores(in []stageIn, cm *costModel) bool {
	for _, s := range in {
		if cm.kind(s.kind).dev.CoreSlowdown.Len() > 0 {
			return true
		}
	}
	return false
}

// lastWorker is the worker id of stage s's last replica: ids go stage by
// stage.
func lastWorker(in []stageIn, s int) int {
	last := -1
	for t := 0; t <= s; t++ {
		last += in[t].k
	}
	return last
}
