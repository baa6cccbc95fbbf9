package runtime

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/tensor"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// workerID is the random id a worker is known by until it is given a
// stage (messages.go).
func workerID() int32 {
	var b [4]byte
	rand.Read(b[:])
	return int32(binary.LittleEndian.Uint32(b[:])&0x3fffffff) | 1<<20
}

// Join is a worker process joining a run: which run and generation, this
// process's Config (its device, precision and test hooks; the timings are
// the coordinator's, sent with the stage), what it logs, and, for an agent
// of a pool, who it says it is.
type Join struct {
	Run string
	Gen uint32 // 0: 1
	// Config is the worker process's: Device, Precision, KillPoints.
	Config Config
	// Log, when set, hears what the worker was given (Assignment.String)
	// before it trains, and when it is done.
	Log func(format string, args ...any)
	// Host labels the worker ("": os.Hostname); Slot, for an agent a
	// launcher placed, is the worker id it was offered (nil: the
	// coordinator's next free one, in join order); Agent is the agent's id
	// in its pool.
	Host  string
	Slot  *int
	Agent string
	// PlanDevice, for a task an environment started (Slurm's srun,
	// torchrun, a Kubernetes Indexed Job), is the device of the plan it
	// stands for (its node's first device plus its local rank): it is
	// given the worker of that device, whatever the order the tasks join
	// in. nil: as Slot says.
	PlanDevice *int
	// Kind is the device profile this worker computes as ("": not said),
	// which must be its stage's device kind on a plan of several kinds.
	Kind string
}

// Serve is a worker process: it joins generation j.Gen of run j.Run, takes
// the stage it is given, trains it and sends back its reports and
// parameters.
func Serve(ctx context.Context, t wire.Transport, j Join) error {
	logf := j.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	gen := max(j.Gen, 1)
	id := workerID()
	ctl, err := wire.NewEndpoint(t, j.Run, gen+ctlGenOffset, id)
	if err != nil {
		return err
	}
	defer ctl.Close()
	a, err := join(ctx, t, ctl, j, id)
	if err != nil {
		return err
	}
	err = serveStage(ctx, t, ctl, j.job(a), a, logf)
	var st *stoppedAt
	if errors.As(err, &st) {
		logf("run %s stopped at step %d: %s", j.Run, st.step, trainedWord(a.Options.Start, st.step))
		return nil
	}
	if err != nil {
		m := map[string]string{"error": err.Error()}
		if IsDataError(err) {
			m["data"] = "true" // the user's to fix: the command exits 2, no restart
		}
		sendJSON(context.Background(), ctl, coordinator, int64(id), mbError, m)
		return err
	}
	logf("run %s done: %s", j.Run, trainedWord(a.Options.Start, a.Steps))
	return nil // serveWork drained ctl while the coordinator was watched
}

// stoppedAt is a worker's stage ended before iteration step by the
// coordinator's order (a stop asked for, or a divergence): Serve says so,
// instead of the steps it was assigned, and returns nil.
type stoppedAt struct{ step int }

func (s *stoppedAt) Error() string { return fmt.Sprintf("stopped at step %d", s.step) }

// trainedWord says which steps a worker trained, from after step from to
// step to: "trained steps 1 to 40", or "trained no step".
func trainedWord(from, to int) string {
	if to <= from {
		return "trained no step"
	}
	return fmt.Sprintf("trained steps %d to %d", from+1, to)
}

// join says hello to the coordinator and waits for the assignment: for
// ever, or, with Config.JoinTimeout, until the coordinator has been
// silent that long (a *JoinError).
func join(ctx context.Context, t wire.Transport, ctl *wire.Endpoint, j Join, id int32) (*assignment, error) {
	host := j.Host
	if host == "" {
		host, _ = os.Hostname()
	}
	if d := j.Config.JoinTimeout; d > 0 {
		var stop func()
		var err error
		if ctx, stop, err = untilSilent(ctx, t, j.Run, d); err != nil {
			return nil, err
		}
		defer stop()
	}
	link := localLinkID(j.Config.Device, j.Config.NoIPC)
	h := hello{Worker: id, Host: host, PID: os.Getpid(), Device: DeviceLabel(j.Config.Device), BLAS: BLASLabel(j.Config.Device), Slot: j.Slot, Agent: j.Agent,
		PlanDevice: j.PlanDevice, Kind: j.Kind, Link: &link}
	if err := sendJSON(ctx, ctl, coordinator, int64(id), mbHello, h); err != nil {
		return nil, fmt.Errorf("joining run %s: %w", j.Run, err)
	}
	_, msg, err := ctl.ReceiveAny(ctx, ctlEdge, 'a', mbAssign)
	if err != nil {
		var je *JoinError
		if errors.As(context.Cause(ctx), &je) {
			return nil, je
		}
		return nil, fmt.Errorf("waiting for a stage: %w", err)
	}
	var a assignment
	if err := json.Unmarshal(msg, &a); err != nil {
		return nil, fmt.Errorf("assignment: %w", err)
	}
	return &a, nil
}

// JoinError is a worker that heard no coordinator of its run for its
// join timeout: the run ID is wrong, or its coordinator is not (or no
// longer) there.
type JoinError struct {
	Run  string
	Wait time.Duration
}

func (e *JoinError) Error() string {
	return fmt.Sprintf("run %s: no coordinator heard for %v: is the run ID right, and its coordinator running? (--join-timeout)", e.Run, e.Wait)
}

// untilSilent is ctx ended with a *JoinError once run's coordinator has
// not been heard (its heartbeats) for d; stop ends the watch.
func untilSilent(ctx context.Context, t wire.Transport, run string, d time.Duration) (context.Context, func(), error) {
	var mu sync.Mutex // guards last
	last := time.Now()
	unsub, err := t.Subscribe(CoordinatorBeats(run), func([]byte) {
		mu.Lock()
		last = time.Now()
		mu.Unlock()
	})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		tick := time.NewTicker(min(d/4, time.Second))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			mu.Lock()
			quiet := time.Since(last)
			mu.Unlock()
			if quiet > d {
				cancel(&JoinError{Run: run, Wait: d})
				return
			}
		}
	}()
	return ctx, func() { unsub(); cancel(nil) }, nil
}

// job is the run as this worker knows it once assigned (its Graph and
// Plan are set once decoded): the coordinator's options and timings, this
// process's device, precision and hooks.
func (j Join) job(a *assignment) *Job {
	c := j.Config
	c.Timings, c.Gen = a.Timings, a.Gen
	return &Job{Run: j.Run, Steps: a.Steps, Options: a.Options, Config: c}
}

// DeviceLabel says where a worker computes: "cpu", or its GPU.
func DeviceLabel(dev *cuda.Device) string {
	if dev == nil {
		return "cpu"
	}
	return fmt.Sprintf("%s (%s, GPU %d)", dev.Name, dev.Arch, dev.Ordinal)
}

// BLASLabel says what computes a worker's matrix products on the cpu (the
// system BLAS loaded, or the Go kernels); "" on a GPU.
func BLASLabel(dev *cuda.Device) string {
	if dev != nil {
		return ""
	}
	return tensor.BLAS().String()
}

// Assignment is what a worker process was given to run.
type Assignment struct {
	Run               string
	Gen               uint32
	Model             string
	Stage, Stages     int
	Replica, Replicas int
	Ops               []string // the stage's ops, in the plan's order
	MicroBatch        int64    // samples per micro-batch on this worker
	From, Steps       int      // it trains steps From+1 to Steps
	Emulate           bool
	Device            string // the plan's device profile
}

func (a Assignment) String() string {
	ops := fmt.Sprintf("%d ops", len(a.Ops))
	if len(a.Ops) == 1 {
		ops = "op " + a.Ops[0]
	} else if len(a.Ops) > 1 {
		ops += fmt.Sprintf(" (%s .. %s)", a.Ops[0], a.Ops[len(a.Ops)-1])
	}
	what := "training"
	if a.Emulate {
		what = "emulating " + a.Device + " devices for"
	}
	replica := ""
	if a.Replicas > 1 {
		replica = fmt.Sprintf(", replica %d of its %d", a.Replica, a.Replicas)
	}
	return fmt.Sprintf("run %s (generation %d): %s %s's stage %d of the plan's %d%s, %s, micro-batch %d, steps %d to %d",
		a.Run, a.Gen, what, a.Model, a.Stage, a.Stages, replica, ops, a.MicroBatch, a.From+1, a.Steps)
}

func assigned(job *Job, w *Worker) Assignment {
	st := w.role.plan.Stages[w.Stage]
	return Assignment{Run: job.Run, Gen: job.gen(), Model: w.role.plan.Model.Name, Stage: w.Stage, Stages: len(w.role.plan.Stages),
		Replica: w.Replica, Replicas: len(st.Devices), Ops: st.Ops, MicroBatch: st.MicroBatch,
		From: job.Options.Start, Steps: job.Steps, Emulate: w.Emulate, Device: w.role.plan.Device.Name}
}

// serveStage trains the stage a assigns, under the coordinator's watch,
// beating meanwhile (with word of a hang).
func serveStage(ctx context.Context, t wire.Transport, ctl *wire.Endpoint, job *Job, a *assignment, logf func(string, ...any)) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	tm := job.Config.Timings
	if err := tm.WatchCoordinator(ctx, t, job.Run, cancel); err != nil {
		return err
	}
	var worker struct {
		sync.Mutex // guards w
		w          *Worker
	}
	go tm.Beat(ctx, t, workerBeats(job.Run, a.Gen), func() []byte {
		b := workerBeat(a.Stage)
		worker.Lock()
		defer worker.Unlock()
		if worker.w != nil {
			if h := worker.w.watch.hang(); h != "" {
				b = append(b, h...)
			}
		}
		return b
	})
	err := serveWork(ctx, t, ctl, job, a, func(w *Worker) {
		worker.Lock()
		worker.w = w
		worker.Unlock()
		logf("%s", assigned(job, w))
	})
	var st *stoppedAt
	if cause := context.Cause(ctx); err != nil && !errors.As(err, &st) && cause != nil && cause != context.Canceled {
		return cause
	}
	return err
}

// iterate runs iteration n and hands over what it owes: the report, the
// update (after the verdict, when steps may be skipped) and a due
// checkpoint's share. stop says the coordinator ended the run.
func iterate(ctx context.Context, ctl, bulk *wire.Endpoint, w *Worker, a *assignment, n int) (stop bool, err error) {
	start := now()
	loss, err := w.compute(ctx, int64(n))
	if err != nil {
		return false, err
	}
	r := Report{Stage: a.Stage, Iter: int64(n), Loss: Float(loss), NonFinite: w.describe(), Backprop: w.backprop}
	if g := w.GradNorm(); !math.IsNaN(g) && !math.IsInf(g, 0) {
		r.GradNorm = g
	}
	skipping := a.Options.OnNonFinite == NonFiniteSkip && !w.Emulate
	if !skipping {
		if err := w.update(int64(n), false); err != nil {
			return false, err
		}
	}
	r.Secs, r.Events, r.Links = since(start), w.Events(), w.Links()
	if n == a.Steps-1 {
		r.OpSeconds, r.DeviceCalls, r.Memory = w.OpSeconds(), w.DeviceCalls(), w.Memory()
	}
	if err := sendJSON(ctx, ctl, coordinator, int64(n)*reportStride+int64(a.Stage), mbReport, r); err != nil {
		return false, err
	}
	if skipping {
		v, err := ctl.Receive(ctx, msgKey(int64(n), mbVerdict, ctlEdge, 'a'))
		if err != nil {
			return false, err
		}
		if string(v) == goAbort {
			return true, nil
		}
		if err := w.update(int64(n), string(v) == verdictSkip); err != nil {
			return false, err
		}
	}
	if k := a.Options.CheckpointEvery; k > 0 && (n+1)%k == 0 && w.Replica > 0 && w.role.sharded(w.Stage) && !w.Emulate {
		if err := w.sendShardState(ctx, n+1); err != nil { // replica 0 writes it
			return false, err
		}
	}
	if k := a.Options.CheckpointEvery; k > 0 && (n+1)%k == 0 && w.Replica == 0 && !w.Emulate {
		w.die("during-checkpoint")
		if err := w.saveShards(ctx, ctl, bulk, a, n+1, msgKey(int64(n)*reportStride+int64(a.Stage), mbCkpt, ctlEdge, 'g')); err != nil {
			return false, err
		}
	}
	if spec := a.Options.Data; spec.EvalDue(n, a.Steps) && !w.Emulate {
		sums, err := w.Eval(ctx, int64(n), spec.EvalSamples)
		if err != nil {
			return false, err
		}
		if err := sendJSON(ctx, ctl, coordinator, int64(n)*reportStride+int64(a.Stage), mbEval, sums); err != nil {
			return false, err
		}
	}
	return false, nil
}

// stopWorker leaves a run the coordinator stopped: with its state first
// when asked for it (replica 0 of each stage), acknowledged before it goes.
func stopWorker(ctx context.Context, ctl, bulk *wire.Endpoint, w *Worker, a *assignment, n int, order string) error {
	switch order {
	case goAbort:
		return nil
	case goStop, goStopAndSave:
	default:
		return fmt.Errorf("the coordinator said %q before an iteration", order)
	}
	if order == goStopAndSave && w.Replica > 0 && w.role.sharded(w.Stage) && !w.Emulate {
		if err := w.sendShardState(ctx, n); err != nil { // replica 0 writes it
			return err
		}
		if err := w.links.ep.Drain(ctx); err != nil { // delivered before this worker leaves
			return err
		}
	}
	if order == goStopAndSave && w.Replica == 0 && !w.Emulate {
		if err := w.saveShards(ctx, ctl, bulk, a, n, msgKey(int64(a.Stage), mbStopState, ctlEdge, 'g')); err != nil {
			return err
		}
	}
	if err := bulk.Drain(ctx); err != nil {
		return err
	}
	return ctl.Drain(ctx)
}

// receivePeers takes every worker's linkID from the coordinator, which
// sends them once all have joined, and has the worker use the same-host
// links they allow (none with Options.NoIPC).
func receivePeers(ctx context.Context, ctl *wire.Endpoint, w *Worker, a *assignment) error {
	msg, err := ctl.Receive(ctx, msgKey(0, mbPeers, ctlEdge, 'a'))
	if err != nil {
		return fmt.Errorf("waiting for the other workers: %w", err)
	}
	var ids []linkID
	if err := json.Unmarshal(msg, &ids); err != nil {
		return fmt.Errorf("the other workers: %w", err)
	}
	if !a.Options.NoIPC {
		w.setPeers(ids)
	}
	return nil
}

// serveWork loads the model and plan a carries into job and runs the
// stage's iterations to the end (nil), or to the coordinator's stop (a
// *stoppedAt).
func serveWork(ctx context.Context, t wire.Transport, ctl *wire.Endpoint, job *Job, a *assignment, started func(*Worker)) error {
	var err error
	if job.Graph, err = dag.Load(a.Model); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	if job.Plan, err = plan.LoadPlan(a.Plan, job.Graph); err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	ep, err := wire.NewEndpoint(t, job.Run, a.Gen, int32(a.Stage))
	if err != nil {
		return err
	}
	defer ep.Close()
	bulk, err := newBulk(job.Config, t, job.Run, a.Gen, int32(a.Stage))
	if err != nil {
		return err
	}
	defer bulk.Close()
	w, err := NewWorker(job, a.Stage, ep)
	if err != nil {
		return err
	}
	defer w.Close()
	started(w)
	if err := receivePeers(ctx, ctl, w, a); err != nil {
		return err
	}
	if (a.Options.Start > 0 || a.Options.Init) && !w.Emulate {
		if err := w.receiveResume(ctx, bulk); err != nil {
			return err
		}
	}
	for n := a.Options.Start; n < a.Steps; n++ {
		w.kill.point = killPoint(job.Config.KillPoints, a.Gen, w.ID, n)
		// every stage starts an iteration together, as the simulator assumes
		order, err := ctl.Receive(ctx, msgKey(int64(n), mbGo, ctlEdge, 'a'))
		if err != nil {
			return err
		}
		if string(order) != goOn {
			if err := stopWorker(ctx, ctl, bulk, w, a, n, string(order)); err != nil {
				return err
			}
			return &stoppedAt{n}
		}
		stop, err := iterate(ctx, ctl, bulk, w, a, n)
		if err != nil {
			return err
		}
		if stop {
			return &stoppedAt{n}
		}
	}
	// a sharded stage's last all-gather, left running (a late gather), ends
	// here, while its replicas are all still in the run: a replica that
	// settled it only when sending its parameters could finish its ring
	// and leave before the other's last chunk was acknowledged, which then
	// waited for ever
	if err := w.settle(); err != nil {
		return err
	}
	// the other stages acknowledge everything sent to them before the
	// parameters go: once the coordinator holds every stage's parameters it
	// stops, and its heartbeats with it, so nothing may still wait on a peer
	if err := ep.Drain(ctx); err != nil {
		return err
	}
	if err := w.sendFinal(ctx, ctl, bulk, a); err != nil {
		return err
	}
	if err := bulk.Drain(ctx); err != nil {
		return err
	}
	return ctl.Drain(ctx) // still watching the coordinator: it acknowledges before it stops
}
