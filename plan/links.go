package plan

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/graphpipe/graphpipe/dag"
)

// The transports a stage edge's tensors take in a run (PlanEdge.Transport).
const (
	// TransportIPC: workers on one host whose devices are GPUs (or the CUDA
	// emulator); the bytes stay on the device, NATS carries a handle, the
	// receiver copies device to device.
	TransportIPC = "ipc"
	// TransportNATS: the bytes travel over NATS (CPU workers, and workers
	// on different hosts).
	TransportNATS = "nats"
)

// HandleBytes is what an IPC message carries over NATS in place of the
// tensors' bytes (a handle, offsets, the frame's header), for pricing
// its costs to either end.
const HandleBytes = 256

// MaxCoreSlowdown is the most worker counts a profile's CoreSlowdown
// lists (beyond them, Slowdown extrapolates).
const MaxCoreSlowdown = 16

// RunCosts are what a run pays beyond its ops, as graphpipe profile
// measures them on the device it runs on: its links as the runtime has
// them, what a message costs the stages at either end, the fixed cost of an
// iteration, and what workers sharing one host's cores lose. A zero field
// was not measured: the cost model then prices as profiles without it
// always were (links from IntraLat/IntraBW and InterLat/InterBW, nothing
// per message, per iteration or per shared core), so the built-in profiles
// and old profile files price as they did.
type RunCosts struct {
	// NATSLat and NATSBW: one message from one worker to another through
	// NATS, one way, latency + bytes/bandwidth (the runtime's reliable
	// endpoints over an embedded server on loopback).
	NATSLat float64 `json:"nats_lat_s,omitempty"`
	NATSBW  float64 `json:"nats_bw,omitempty"`
	// NATSJoinS[k-1]: one message's one-way time (4 KiB) in a join of k
	// workers on one host, k−1 of them computing and sending to one that
	// sends each a message back, as a graph pipeline's branches and the
	// stage that joins them do; with more workers than cores a message
	// waits for one (JoinExtra).
	NATSJoinS JoinLatencies `json:"nats_join_s,omitzero"`
	// IPCLat and IPCBW: the same-host device path, a handle over NATS and
	// a device-to-device copy (IPCBW: the copy's bytes/s); measured on a
	// CUDA backend or its emulator, never on the CPU.
	IPCLat float64 `json:"ipc_lat_s,omitempty"`
	IPCBW  float64 `json:"ipc_bw,omitempty"`
	// RingLat and RingBW: one step of the ring all-reduce between the
	// replicas of a stage, latency + bytes/bandwidth.
	RingLat float64 `json:"allreduce_lat_s,omitempty"`
	RingBW  float64 `json:"allreduce_bw,omitempty"`
	// SendS and SendBW: the sender's own time per message (its send
	// call), SendS + bytes/SendBW; RecvS and RecvBW the receiver's, for a
	// message that has landed. The stage computes nothing meanwhile.
	SendS  float64 `json:"send_s,omitempty"`
	SendBW float64 `json:"send_bw,omitempty"`
	// SendHoldS is the most a message waits for its sender's next
	// computing action to end before it travels: on a host whose cores are
	// all busy (the sender's, the others'), delivering it needs one.
	SendHoldS float64 `json:"send_hold_s,omitempty"`
	RecvS     float64 `json:"recv_s,omitempty"`
	RecvBW    float64 `json:"recv_bw,omitempty"`
	// GoS and GoWorkerS: when the coordinator's go reaches worker w (from
	// 0, in the order it tells them: stage by stage), GoS + w·GoWorkerS
	// after it begins to tell them; the worker's stage begins then.
	GoS       float64 `json:"go_s,omitempty"`
	GoWorkerS float64 `json:"go_worker_s,omitempty"`
	// ReportS and ReportWorkerS: what an iteration costs after its last
	// action, every worker's report to the coordinator, ReportS +
	// workers·ReportWorkerS.
	ReportS       float64 `json:"report_s,omitempty"`
	ReportWorkerS float64 `json:"report_worker_s,omitempty"`
	// HostCores is the host's logical cores; CoreSlowdown[k-1] is an op's
	// time with k workers busy on them at once, each with its share of the
	// cores (GOMAXPROCS cores/k, at least 1, as local workers get), over
	// its time in one process with all of them (what op times measure).
	HostCores    int       `json:"host_cores,omitempty"`
	CoreSlowdown Slowdowns `json:"core_slowdown,omitzero"`
}

// Slowdowns is a list of at most MaxCoreSlowdown figures, written as a
// JSON list, and comparable: a profile is a map key to the planner.
type Slowdowns struct {
	n int
	v [MaxCoreSlowdown]float64
}

// NewSlowdowns is a list of vs; it keeps the first MaxCoreSlowdown.
func NewSlowdowns(vs ...float64) Slowdowns {
	var s Slowdowns
	s.n = copy(s.v[:], vs)
	return s
}

// Values is the list.
func (s Slowdowns) Values() []float64 { return append([]float64(nil), s.v[:s.n]...) }

// Len is its length.
func (s Slowdowns) Len() int { return s.n }

// MarshalJSON writes the list.
func (s Slowdowns) MarshalJSON() ([]byte, error) { return json.Marshal(s.v[:s.n]) }

// UnmarshalJSON reads a list of at most MaxCoreSlowdown numbers.
func (s *Slowdowns) UnmarshalJSON(data []byte) error {
	vs, err := perWorkers(data, "core_slowdown")
	*s = NewSlowdowns(vs...)
	return err
}

// perWorkers reads field's JSON list of at most MaxCoreSlowdown numbers,
// one per worker count.
func perWorkers(data []byte, field string) ([]float64, error) {
	var vs []float64
	if err := json.Unmarshal(data, &vs); err != nil {
		return nil, fmt.Errorf("%s: %v", field, err)
	}
	if len(vs) > MaxCoreSlowdown {
		return nil, fmt.Errorf("%s: at most %d worker counts, got %d", field, MaxCoreSlowdown, len(vs))
	}
	return vs, nil
}

// JoinLatencies is NATSJoinS: a Slowdowns list of seconds, per worker
// count from 1.
type JoinLatencies struct{ Slowdowns }

// NewJoinLatencies is a list of vs; it keeps the first MaxCoreSlowdown.
func NewJoinLatencies(vs ...float64) JoinLatencies { return JoinLatencies{NewSlowdowns(vs...)} }

// UnmarshalJSON reads a list of at most MaxCoreSlowdown numbers.
func (j *JoinLatencies) UnmarshalJSON(data []byte) error {
	vs, err := perWorkers(data, "nats_join_s")
	*j = NewJoinLatencies(vs...)
	return err
}

// JoinExtra is how much longer a message between workers on one host
// takes one way with workers of them on it than with two
// (NATSJoinS[workers-1] − NATSJoinS[1], at least 0; beyond the list its
// last entry's): what NATSLat, measured between two, leaves out. 0 where
// the profile measured no joins.
func (d Device) JoinExtra(workers int) float64 {
	s := d.NATSJoinS.Values()
	if len(s) < 2 || workers <= 2 {
		return 0
	}
	return max(0, s[min(workers, len(s))-1]-s[1])
}

// validate refuses a figure outside the bounds that keep the cost
// model's sums finite (bounds.go): a rate that is not 0 (unmeasured) nor
// in [MinRate, MaxRate], a time outside [0, MaxSeconds], a slowdown list
// that is empty of sense (a non-positive entry, too many).
func (r RunCosts) validate() error {
	errs := []error{
		seconds("nats_lat_s", r.NATSLat), optionalRate("nats_bw", r.NATSBW), seconds("ipc_lat_s", r.IPCLat), optionalRate("ipc_bw", r.IPCBW),
		seconds("allreduce_lat_s", r.RingLat), optionalRate("allreduce_bw", r.RingBW), seconds("send_s", r.SendS), optionalRate("send_bw", r.SendBW),
		seconds("recv_s", r.RecvS), optionalRate("recv_bw", r.RecvBW), seconds("send_hold_s", r.SendHoldS), seconds("go_s", r.GoS),
		seconds("go_worker_s", r.GoWorkerS), seconds("report_s", r.ReportS), seconds("report_worker_s", r.ReportWorkerS),
		within("host_cores", float64(r.HostCores), 0, MaxHostCores),
	}
	for i, v := range r.NATSJoinS.Values() {
		errs = append(errs, seconds(fmt.Sprintf("nats_join_s[%d]", i), v))
	}
	for i, v := range r.CoreSlowdown.Values() {
		errs = append(errs, within(fmt.Sprintf("core_slowdown[%d]", i), v, 1/MaxSlowdown, MaxSlowdown))
	}
	return firstErr(errs...)
}

// IsCPU says whether d is a CPU: a profile whose name starts with "cpu"
// ("cpu", a measured "cpu (measured)", a user's "cpu-slow").
func (d Device) IsCPU() bool { return isCPU(d.Name) }

func isCPU(name string) bool { return strings.HasPrefix(strings.ToLower(name), "cpu") }

// SameDevice says whether profiles named a and b are of one device, as a
// pool matches an agent's profile to a plan's: both CPUs, the same name
// (its case and a " (measured)" aside), or both naming one built-in GPU
// ("h100" and "NVIDIA H100 80GB HBM3 sm_90 (measured)").
func SameDevice(a, b string) bool {
	if isCPU(a) && isCPU(b) {
		return true
	}
	norm := func(s string) string { return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(s)), " (measured)") }
	a, b = norm(a), norm(b)
	if a == b {
		return true
	}
	for name := range Profiles {
		if name != "cpu" && strings.Contains(a, name) && strings.Contains(b, name) {
			return true
		}
	}
	return false
}

// IPCCapable says whether workers on one host move d's tensors device to
// device (TransportIPC): every device but a CPU, and any whose profile
// measured the same-host device path (the CUDA emulator's, which is named
// as the CPU it runs on).
func (d Device) IPCCapable() bool { return d.IPCBW > 0 || !d.IsCPU() }

// Slowdown is how much longer an op takes with k workers busy on one host
// than in one process with the host to itself: CoreSlowdown[k-1], beyond
// the list its last entry's share of the cores divided among k (time
// sliced), 1 where the profile measured none.
func (d Device) Slowdown(k int) float64 {
	s := d.CoreSlowdown.Values()
	switch {
	case len(s) == 0 || k < 1:
		return 1
	case k <= len(s):
		return s[k-1]
	}
	return s[len(s)-1] * float64(k) / float64(len(s))
}

// HostWorkers is how many workers the cost model takes to share one host
// in a run on devices devices, perNode to a node: a node's, or all of them
// on fewer.
func HostWorkers(devices, perNode int) int { return max(1, min(devices, perNode)) }

// IPCTensors says whether edge e's tensors can go device to device
// (TransportIPC) between workers that reach each other: both its stages
// on one device each, and each tensor a float32 output of the producing
// stage that goes to the consuming stage alone (over this edge) and is
// not passed on by it. The run sends any other edge's bytes over NATS.
func (p *Plan) IPCTensors(g *dag.Graph, e int) bool {
	pe := p.Edges[e]
	if len(p.Stages[pe.From].Devices) != 1 || len(p.Stages[pe.To].Devices) != 1 {
		return false
	}
	for _, x := range pe.Tensors {
		i, ok := g.OpIndex(x)
		if !ok || !slices.Contains(p.Stages[pe.From].Ops, x) || g.Out(i).DType != dag.Float32 {
			return false
		}
		for k, other := range p.Edges {
			if k != e && slices.Contains(other.Tensors, x) && (other.From == pe.From || other.From == pe.To) {
				return false // it goes to another stage too, or is passed on
			}
		}
	}
	return true
}

// TimeSliced is d for workers that share one GPU: where d measured no
// sharing (a GPU's profile never does), its CoreSlowdown becomes [1], so
// that an op with k of them busy at once takes k times its time alone
// (Slowdown extrapolates the one entry: the GPU runs one process's kernels
// at a time, each for its slice). A profile that measured its sharing
// keeps its own figures.
func (d Device) TimeSliced() Device {
	if d.CoreSlowdown.Len() == 0 {
		d.CoreSlowdown = NewSlowdowns(1)
	}
	return d
}

// IterationFixed is what an iteration of a run of workers workers costs
// after its last action: their reports to the coordinator.
func (d Device) IterationFixed(workers int) float64 {
	return d.ReportS + float64(workers)*d.ReportWorkerS
}

// GoDelay is when the coordinator's go reaches worker w (from 0) after it
// begins to tell the workers.
func (d Device) GoDelay(w int) float64 { return d.GoS + float64(w)*d.GoWorkerS }

// MessageCPU is what a message of bytes costs its sender (the send call)
// and its receiver (taking it once it has landed), in seconds of their own
// time.
func (d Device) MessageCPU(bytes float64) (send, recv float64) {
	if bytes <= 0 {
		return 0, 0
	}
	send, recv = d.SendS, d.RecvS
	if d.SendBW > 0 {
		send += bytes / d.SendBW
	}
	if d.RecvBW > 0 {
		recv += bytes / d.RecvBW
	}
	return send, recv
}

// MessageBytes is the bytes a message of an edge's transport carries for a
// payload of bytes: the bytes over NATS, a handle over IPC.
func MessageBytes(transport string, bytes float64) float64 {
	if transport == TransportIPC {
		return HandleBytes
	}
	return bytes
}

// EdgeSeconds is what the plan's profile prices edge i's messages of one
// iteration at, both directions, every replica: the time their ends spend
// sending and taking them (Device.MessageCPU; over IPC a handle's), what
// a run reports as an edge's measured seconds. A micro-batch's rows go in
// one message per pair of the two stages' replicas whose rows overlap,
// each priced at the average of their bytes. 0 where the profile measured
// no message costs.
func (p *Plan) EdgeSeconds(i int) float64 {
	e := p.Edges[i]
	from, to := p.Stages[e.From], p.Stages[e.To]
	a, b := len(from.Devices), len(to.Devices)
	n := overlaps(p.MicroBatch, a, b)
	bytes := MessageBytes(e.Transport, float64(e.Bytes*p.MicroBatch)/float64(n))
	send, _ := p.stageDevice(e.From).MessageCPU(bytes)
	_, recv := p.stageDevice(e.To).MessageCPU(bytes)
	return 2 * float64(p.MicroBatches) * float64(n) * (send + recv)
}

// stageDevice is the profile stage s was priced on: its kind's, or the
// plan's.
func (p *Plan) stageDevice(s int) Device {
	if p.Cluster != nil {
		return p.Cluster.Kinds[p.KindOf(s)].Device
	}
	return p.Device
}

// overlaps is how many pairs of a replica of a and one of b hold rows in
// common when mb rows are split among each's replicas as a run splits
// them (replica r of k: rows r·mb/k to (r+1)·mb/k).
func overlaps(mb int64, a, b int) int {
	n := 0
	for i := 0; i < a; i++ {
		lo, hi := int64(i)*mb/int64(a), int64(i+1)*mb/int64(a)
		for j := 0; j < b; j++ {
			if max(lo, int64(j)*mb/int64(b)) < min(hi, int64(j+1)*mb/int64(b)) {
				n++
			}
		}
	}
	return max(n, 1)
}
