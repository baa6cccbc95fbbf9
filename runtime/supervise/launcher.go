package supervise

import (
	"context"
	"time"

	"github.com/graphpipe/graphpipe/plan"
)

// Launcher starts and ends the workers of a run's generations. The
// supervisor drives three: local worker processes (LocalLauncher), workers
// started elsewhere (ExternalLauncher) and agents taken from a pool
// (PoolLauncher). A launcher may be asked for any number of generations,
// each with its own plan and slots.
type Launcher interface {
	// Start brings up gen's workers, one per slot, each joining generation
	// gen.Gen of gen.Run. It calls gen.Lost when a worker is lost before
	// the generation ends; ctx ends with the generation.
	Start(ctx context.Context, gen *Generation) error
	// Stop ends gen's workers: at once when the generation failed,
	// otherwise once they have left (briefly waited for).
	Stop(gen *Generation, failed bool)
	// Close gives back what the launcher still holds once the run is over.
	Close() error
}

// An Ender is a Launcher whose workers are told how the run ended (the
// tasks an environment started exit with it): the supervisor calls End
// with the run's error (nil: it ended well) instead of Close.
type Ender interface {
	Launcher
	End(err error) error
}

// endLauncher gives l back once the run is over, ended with err.
func endLauncher(l Launcher, err error) {
	if e, ok := l.(Ender); ok {
		e.End(err)
		return
	}
	l.Close()
}

// Generation is one attempt at a job: a plan, the workers it takes (Slots)
// and the step it starts from. A restart is a new generation, whose plan
// and workers may differ from the last one's.
type Generation struct {
	Run   string
	Gen   uint32
	Plan  *plan.Plan
	Slots []Slot
	From  int // the step it starts at
	// Wait, when positive, bounds how long Start waits for its workers
	// (a restart's, when elastic); 0: the launcher's own limit.
	Wait time.Duration
	// Lost is how a launcher reports a worker lost mid-generation: the
	// generation fails with err.
	Lost func(err error)
	// Agents, set by a launcher that places workers on a pool's agents
	// (PoolLauncher), is the agent on each worker id: the coordinator
	// takes a worker id's hello from that agent only (runtime.Config.Agents).
	Agents []string
}

// Slot is one worker of a generation: a replica of a stage, on one of the
// plan's devices, on one of its nodes (Device / DevicesPerNode).
type Slot struct {
	Worker  int `json:"worker"` // the worker id, the coordinator's numbering
	Stage   int `json:"stage"`
	Replica int `json:"replica"`
	Device  int `json:"device"`
	Node    int `json:"node"`
	// Kind is the device profile the slot's stage runs on, on a plan of
	// several device kinds ("" on one of one kind): a pool places it on an
	// agent of that profile only.
	Kind string `json:"kind,omitempty"`
	// Profile is the device profile the slot's stage was planned for (its
	// kind's, or the plan's) and Memory the bytes its device holds at the
	// peak: a pool places it only on an agent of a matching device
	// (plan.SameDevice) with as much memory, where the agent says.
	Profile string `json:"profile,omitempty"`
	Memory  int64  `json:"memory,omitempty"`
}

// Slots are plan's workers in worker id order.
func Slots(p *plan.Plan) []Slot {
	var out []Slot
	for s, st := range p.Stages {
		profile := p.Device.Name
		if p.Cluster != nil {
			profile = p.Cluster.Kinds[p.KindOf(s)].Name()
		}
		for r, d := range st.Devices {
			out = append(out, Slot{Worker: len(out), Stage: s, Replica: r, Device: d, Node: p.NodeOf(d), Kind: st.Kind,
				Profile: profile, Memory: st.PeakBytes})
		}
	}
	return out
}
