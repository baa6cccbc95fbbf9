package runtime

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"sync"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/search"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// Control traffic runs on edge -1 in the stage traffic's generation, at an
// even generation number below it: the coordinator is stage -1, a worker is
// known by a random id until it is given a stage. A restart starts a new
// generation, whose frames never mix with an older one's.
const (
	ctlGenOffset = 1 << 16
	ctlEdge      = -1
	coordinator  = -1
	mbHello      = 0
	mbAssign     = 1
	mbReport     = 2
	mbParams     = 3
	mbError      = 4
	mbGo         = 5
	mbCkpt       = 6
	mbResume     = 7
	mbEval       = 8
	reportStride = 1 << 20 // report keys: iter·reportStride + stage
)

// Every control message's key names its sender (the iteration field holds a
// worker id or a stage), since an endpoint keys messages, not senders.

type hello struct {
	Worker int32  `json:"worker"`
	Host   string `json:"host"`
	PID    int    `json:"pid"`
	Device string `json:"device,omitempty"` // where it computes: "cpu", or the GPU's name
}

type assignment struct {
	Gen     uint32          `json:"gen"`
	Stage   int             `json:"worker"` // the worker id: a (stage, replica)
	Model   json.RawMessage `json:"model"`
	Plan    json.RawMessage `json:"plan"`
	Options Options         `json:"options"`
	Steps   int             `json:"steps"`
	Workers int             `json:"workers"`
}

// Report is one stage's account of one iteration.
type Report struct {
	Stage  int     `json:"stage"`
	Iter   int64   `json:"iter"`
	Loss   float64 `json:"loss"`
	Secs   float64 `json:"seconds"`
	Events []Event `json:"events"`
	// OpSeconds, with the last iteration's report: each op's accumulated
	// forward and backward seconds over the run.
	OpSeconds map[string][2]float64 `json:"op_seconds,omitempty"`
}

func sendJSON(ctx context.Context, ep *Endpoint, peer int32, iter int64, mb int32, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return ep.Send(ctx, peer, msgKey{iter, mb, ctlEdge, 'a'}, b)
}

func workerID() int32 {
	var b [4]byte
	rand.Read(b[:])
	return int32(binary.LittleEndian.Uint32(b[:])&0x3fffffff) | 1<<20
}

// WorkerOption sets an option of one worker process (ServeOn).
type WorkerOption func(*Options)

// WithPrecision makes the worker's matrix products compute in p ("fp32" or
// "bf16": stage.Executor.SetPrecision; bf16 needs its device).
func WithPrecision(p string) WorkerOption { return func(o *Options) { o.Precision = p } }

// Serve is a worker process of generation 1: see ServeGen.
func Serve(ctx context.Context, t Transport, run string) error { return ServeGen(ctx, t, run, 1) }

// ServeGen is a worker process on the CPU: see ServeOn.
func ServeGen(ctx context.Context, t Transport, run string, gen uint32) error {
	return ServeOn(ctx, t, run, gen, nil)
}

// ServeOn is a worker process: it joins generation gen of run, takes the
// stage it is given, trains it (on dev, or the CPU when dev is nil) and
// sends back its reports and parameters. opts set what belongs to this
// worker process rather than to the run (WithPrecision).
func ServeOn(ctx context.Context, t Transport, run string, gen uint32, dev *cuda.Device, opts ...WorkerOption) error {
	id := workerID()
	ctl, err := NewEndpoint(t, run, gen+ctlGenOffset, id)
	if err != nil {
		return err
	}
	defer ctl.Close()
	host, _ := os.Hostname()
	where := "cpu"
	if dev != nil {
		where = fmt.Sprintf("%s (%s, GPU %d)", dev.Name, dev.Arch, dev.Ordinal)
	}
	if err := sendJSON(ctx, ctl, coordinator, int64(id), mbHello, hello{id, host, os.Getpid(), where}); err != nil {
		return fmt.Errorf("joining run %s: %w", run, err)
	}
	_, msg, err := ctl.ReceiveAny(ctx, ctlEdge, 'a', mbAssign)
	if err != nil {
		return fmt.Errorf("waiting for a stage: %w", err)
	}
	var a assignment
	if err := json.Unmarshal(msg, &a); err != nil {
		return fmt.Errorf("assignment: %w", err)
	}
	a.Options.Device = dev
	for _, o := range opts {
		o(&a.Options)
	}
	if err = serveStage(ctx, t, run, ctl, &a); err != nil {
		m := map[string]string{"error": err.Error()}
		if IsDataError(err) {
			m["data"] = "true" // the user's to fix: the command exits 2, no restart
		}
		sendJSON(context.Background(), ctl, coordinator, int64(id), mbError, m)
		return err
	}
	return nil // serveWork drained ctl while the coordinator was watched
}

func serveStage(ctx context.Context, t Transport, run string, ctl *Endpoint, a *assignment) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if err := watchCoordinator(ctx, t, run, cancel); err != nil {
		return err
	}
	var worker struct {
		sync.Mutex // guards w
		w          *Worker
	}
	go beatWith(ctx, t, workerBeats(run, a.Gen), func() []byte {
		b := workerBeat(a.Stage)
		worker.Lock()
		defer worker.Unlock()
		if worker.w != nil {
			if h := worker.w.hang(); h != "" {
				b = append(b, h...)
			}
		}
		return b
	})
	err := serveWork(ctx, t, run, ctl, a, func(w *Worker) { worker.Lock(); worker.w = w; worker.Unlock() })
	if cause := context.Cause(ctx); err != nil && cause != nil && cause != context.Canceled {
		return cause
	}
	return err
}

func serveWork(ctx context.Context, t Transport, run string, ctl *Endpoint, a *assignment, started func(*Worker)) error {
	g, err := dag.Load(a.Model)
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	plan, err := search.DecodePlan(a.Plan)
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	ep, err := NewEndpoint(t, run, a.Gen, int32(a.Stage))
	if err != nil {
		return err
	}
	defer ep.Close()
	w, err := NewWorker(g, plan, a.Stage, ep, a.Options)
	if err != nil {
		return err
	}
	defer w.Close()
	started(w)
	if (a.Options.Start > 0 || a.Options.Init) && !w.Emulate {
		msg, err := ctl.Receive(ctx, msgKey{0, mbResume, ctlEdge, 'g'})
		if err != nil {
			return fmt.Errorf("waiting for the checkpoint to resume from: %w", err)
		}
		if err := w.loadState(msg); err != nil {
			return err
		}
	}
	for n := a.Options.Start; n < a.Steps; n++ {
		w.kill = killPoint(a.Gen, w.ID, n)
		// every stage starts an iteration together, as the simulator assumes
		if _, err := ctl.Receive(ctx, msgKey{int64(n), mbGo, ctlEdge, 'a'}); err != nil {
			return err
		}
		start := now()
		loss, err := w.Run(ctx, int64(n))
		if err != nil {
			return err
		}
		r := Report{Stage: a.Stage, Iter: int64(n), Loss: loss, Secs: since(start), Events: w.Events()}
		if n == a.Steps-1 {
			r.OpSeconds = w.OpSeconds()
		}
		if err := sendJSON(ctx, ctl, coordinator, int64(n)*reportStride+int64(a.Stage), mbReport, r); err != nil {
			return err
		}
		if k := a.Options.CheckpointEvery; k > 0 && (n+1)%k == 0 && w.Replica == 0 && !w.Emulate {
			w.die("during-checkpoint")
			st, err := w.state()
			if err != nil {
				return err
			}
			if err := ctl.Send(ctx, coordinator, msgKey{int64(n)*reportStride + int64(a.Stage), mbCkpt, ctlEdge, 'g'}, st); err != nil {
				return err
			}
		}
		if spec := a.Options.Data; spec.EvalDue(n, a.Steps) && !w.Emulate {
			sums, err := w.Eval(ctx, int64(n), spec.EvalSamples)
			if err != nil {
				return err
			}
			if err := sendJSON(ctx, ctl, coordinator, int64(n)*reportStride+int64(a.Stage), mbEval, sums); err != nil {
				return err
			}
		}
	}
	// the other stages acknowledge everything sent to them before the
	// parameters go: once the coordinator holds every stage's parameters it
	// stops, and its heartbeats with it, so nothing may still wait on a peer
	if err := ep.Drain(ctx); err != nil {
		return err
	}
	params, err := encodeParams(w.Params())
	if err != nil {
		return err
	}
	if err := ctl.Send(ctx, coordinator, msgKey{int64(a.Stage), mbParams, ctlEdge, 'g'}, params); err != nil {
		return err
	}
	return ctl.Drain(ctx) // still watching the coordinator: it acknowledges before it stops
}
