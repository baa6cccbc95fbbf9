package runtime

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

func now() time.Time            { return time.Now() }
func since(t time.Time) float64 { return time.Since(t).Seconds() }

// Coordinate runs job with workers that join over t: it waits for one
// worker per device of the plan, assigns the stages, collects each
// iteration's reports (calling progress, when set, with the iteration's
// loss) and the final parameters.
func Coordinate(ctx context.Context, job *Job, t wire.Transport, progress func(iter int64, loss float64)) (*Result, error) {
	g, plan := job.Graph, job.Plan
	if err := plan.CheckModelHash("coordinate", g); err != nil {
		return nil, err
	}
	ctl, err := wire.NewEndpoint(t, job.Run, job.gen()+ctlGenOffset, coordinator)
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	// beat from the start: a worker watches for the heartbeats from its
	// assignment on, and the others may take a while to join
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	tm := job.Config.Timings
	go tm.Beat(ctx, t, CoordinatorBeats(job.Run), nothing)
	bulk, err := newBulk(job.Config, t, job.Run, job.gen(), coordinator)
	if err != nil {
		return nil, err
	}
	defer bulk.Close()
	c := &collector{ctl: ctl, bulk: bulk, job: job, lay: layout(plan), res: &Result{Params: map[string]*stage.Value[float32]{}},
		verdict: stage.NonFinite{Skip: job.Options.OnNonFinite == NonFiniteSkip && !job.Options.Emulate, MaxSkips: cmp.Or(job.Config.MaxSkips, 10)}}
	if dir := job.Config.CheckpointDir; dir != "" && !job.Options.Emulate {
		target, unprobe, err := newCheckpointTarget(dir)
		if err != nil {
			return nil, err
		}
		defer unprobe()
		c.target = target
	}
	who, err := c.assign(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.introduce(ctx, who); err != nil {
		return nil, err
	}
	if r := job.Config.Resume; r != nil && !job.Options.Emulate {
		if err := sendResume(ctx, bulk, job, c.lay, r); err != nil {
			return nil, err
		}
	}
	lay := c.lay
	name := func(id int) string {
		s, r := lay.where(id)
		return fmt.Sprintf("worker %d (stage %d, replica %d)", id, s, r)
	}
	c.left = make([]atomic.Bool, lay.total)
	if err := tm.watchWorkers(ctx, t, job.Run, job.gen(), lay.total, name, func(id int) bool { return c.left[id].Load() }, cancel); err != nil {
		return nil, err
	}
	res, err := c.collect(ctx, progress)
	if res != nil {
		res.Joined = who
		for _, j := range who {
			res.Devices = append(res.Devices, j.Device)
		}
	}
	if cause := context.Cause(ctx); err != nil && cause != nil && cause != context.Canceled && !IsDataError(err) {
		return nil, cause
	}
	return res, err
}

// nothing is the coordinator's heartbeat: its arrival is the news.
func nothing() []byte { return []byte{} }

// assign waits for a worker per slot of the plan (Config.JoinTimeout
// bounds the wait, Config.Stop ends it) and gives each its stage; it says
// who joined, by worker id.
func (c *collector) assign(ctx context.Context) ([]Joined, error) {
	job, lay := c.job, c.lay
	joinCtx, joined := ctx, func() {}
	if d := job.Config.JoinTimeout; d > 0 {
		joinCtx, joined = context.WithTimeoutCause(ctx, d, fmt.Errorf("not all joined within %v", d))
	}
	defer joined()
	if stop := job.Config.Stop; stop != nil { // asked to stop while waiting: nothing to save
		var stopJoin context.CancelCauseFunc
		joinCtx, stopJoin = context.WithCancelCause(joinCtx)
		defer stopJoin(nil)
		go func() {
			select {
			case <-stop:
				stopJoin(&StoppedError{Step: job.From(), Dir: job.Config.CheckpointDir, Early: true})
			case <-joinCtx.Done():
			}
		}()
	}
	o := job.Options
	if job.Config.Resume != nil {
		o.Start = job.From()
	}
	a := assignment{Gen: job.gen(), Model: dag.Write(job.Graph.Model()), Plan: job.Plan.Encode(), Options: o,
		Timings: job.Config.Timings, Steps: job.Steps, Workers: lay.total, Checkpoint: c.target}
	c.workers = make([]int32, lay.total) // by worker id: each one's control address
	who := make([]Joined, lay.total)
	slots := newFreeSlots(job.Plan, lay)
	if job.Plan.Cluster == nil && !job.Options.Emulate {
		slots.device = job.Plan.Device.Name
	}
	for n := 0; n < len(c.workers); {
		h, err := c.hello(joinCtx, n)
		if err != nil {
			return nil, err
		}
		if !placedHere(job.Config.Agents, h) {
			continue // its agent's offer was taken back: the placed one comes
		}
		n++
		if a.Stage, err = slots.take(h); err != nil {
			return nil, err
		}
		if err := sendJSON(ctx, c.ctl, h.Worker, 0, mbAssign, a); err != nil {
			return nil, err
		}
		c.workers[a.Stage] = h.Worker
		who[a.Stage] = Joined{Host: h.Host, PID: h.PID, Device: h.Device, BLAS: h.BLAS, Agent: h.Agent}
		if h.Link != nil {
			who[a.Stage].link = *h.Link
		}
	}
	return who, nil
}

// placedHere says whether h may take the worker id it says: any, unless
// agents names another agent on it.
func placedHere(agents []string, h hello) bool {
	if h.Slot == nil || *h.Slot < 0 || *h.Slot >= len(agents) || agents[*h.Slot] == "" {
		return true
	}
	return h.Agent == agents[*h.Slot]
}

// introduce tells every worker, once all have joined, who the others are
// for same-host links (mbPeers).
func (c *collector) introduce(ctx context.Context, who []Joined) error {
	ids := make([]linkID, len(who))
	for i, j := range who {
		ids[i] = j.link
	}
	b, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	for _, w := range c.workers {
		if err := c.ctl.Send(ctx, w, msgKey(0, mbPeers, ctlEdge, 'a'), b); err != nil {
			return err
		}
	}
	return nil
}

// hello takes the next worker's hello, n having joined before it.
func (c *collector) hello(joinCtx context.Context, n int) (hello, error) {
	var h hello
	_, msg, err := c.ctl.ReceiveAny(joinCtx, ctlEdge, 'a', mbHello)
	if err != nil {
		var se *StoppedError
		if cause := context.Cause(joinCtx); errors.As(cause, &se) {
			return h, se
		} else if cause != nil {
			err = cause
		}
		return h, fmt.Errorf("waiting for workers: %d of %d joined: %w", n, c.lay.total, err)
	}
	return h, json.Unmarshal(msg, &h)
}

// freeSlots hands out worker ids to the workers that join: the one a
// launcher placed a worker on (hello.Slot), the one of the plan's device a
// task stands for (hello.PlanDevice), or the next free one; on a plan of
// several device kinds, one of the worker's kind (kinds); on a plan of
// one, to a worker of its device (plan.SameDevice) or one that does not
// say.
type freeSlots struct {
	taken    []bool
	next     int
	kinds    []string      // per worker id, its stage's device kind; nil on a plan of one kind
	byDevice map[int]int   // the plan's device -> its worker id
	byTask   map[int]hello // the plan's device -> the task that stands for it
	// device, on a plan of one kind that computes, is its device profile:
	// a worker that says it computes as another is refused
	device string
}

func newFreeSlots(p *plan.Plan, lay replicas) *freeSlots {
	f := &freeSlots{taken: make([]bool, lay.total), kinds: slotKinds(p, lay), byDevice: map[int]int{}, byTask: map[int]hello{}}
	for s, st := range p.Stages {
		for r, d := range st.Devices {
			f.byDevice[d] = int(lay.id(s, r))
		}
	}
	return f
}

// slotKinds is each worker id's device kind on a plan of several kinds,
// nil on one of one kind.
func slotKinds(p *plan.Plan, lay replicas) []string {
	if p.Cluster == nil {
		return nil
	}
	kinds := make([]string, lay.total)
	for id := range kinds {
		s, _ := lay.where(id)
		kinds[id] = p.Stages[s].Kind
	}
	return kinds
}

// kindError is a worker of the wrong device kind for the plan: the user's
// to fix (exit 2), naming the worker's flag.
func kindError(h hello, format string, args ...any) error {
	return &JobError{Op: "join", Field: "worker --device-profile", Msg: fmt.Sprintf("worker %d (host %s, pid %d): ", h.Worker, h.Host, h.PID) + fmt.Sprintf(format, args...)}
}

func (f *freeSlots) take(h hello) (int, error) {
	if f.device != "" && h.Kind != "" && !plan.SameDevice(h.Kind, f.device) {
		return 0, kindError(h, "computes as %s, but the plan is for %s devices", h.Kind, f.device)
	}
	if h.PlanDevice != nil {
		return f.takeDevice(h)
	}
	if f.kinds != nil && h.Kind == "" && h.Slot == nil {
		return 0, kindError(h, "the plan's stages run on devices of several kinds; start each worker with the device profile it computes as")
	}
	if h.Slot != nil {
		s := *h.Slot
		if s < 0 || s >= len(f.taken) || f.taken[s] {
			return 0, fmt.Errorf("worker %d (host %s, pid %d) joined as worker %d, which is taken or beyond the plan's %d", h.Worker, h.Host, h.PID, s, len(f.taken))
		}
		if f.kinds != nil && h.Kind != "" && h.Kind != f.kinds[s] {
			return 0, kindError(h, "computes as %s, but worker %d's stage runs on %s", h.Kind, s, f.kinds[s])
		}
		f.taken[s] = true
		return s, nil
	}
	if f.kinds != nil { // the first free slot of its kind
		for s, k := range f.kinds {
			if !f.taken[s] && k == h.Kind {
				f.taken[s] = true
				return s, nil
			}
		}
		return 0, kindError(h, "computes as %s, but no stage left to take runs on %s (the plan's kinds: %s)", h.Kind, h.Kind, strings.Join(distinct(f.kinds), ", "))
	}
	for f.next < len(f.taken) && f.taken[f.next] {
		f.next++
	}
	if f.next == len(f.taken) {
		return 0, fmt.Errorf("worker %d (host %s, pid %d) joined a generation whose workers are all there", h.Worker, h.Host, h.PID)
	}
	f.taken[f.next] = true
	return f.next, nil
}

// takeDevice gives a task the worker of the plan's device it stands for
// (hello.PlanDevice), of its kind when it says one. Two tasks standing for
// one device are the environment's fault, final (a *JobError on
// PlanDevice).
func (f *freeSlots) takeDevice(h hello) (int, error) {
	d := *h.PlanDevice
	s, ok := f.byDevice[d]
	switch {
	case !ok:
		return 0, fmt.Errorf("worker %d (host %s, pid %d) stands for device %d of the plan, which runs no stage on it", h.Worker, h.Host, h.PID, d)
	case f.taken[s]:
		o := f.byTask[d]
		return 0, &JobError{Op: "join", Field: "PlanDevice", Msg: fmt.Sprintf("two tasks stand for device %d of the plan: host %s pid %d and host %s pid %d", d, o.Host, o.PID, h.Host, h.PID)}
	case f.kinds != nil && h.Kind != "" && h.Kind != f.kinds[s]:
		return 0, kindError(h, "computes as %s, but device %d of the plan (worker %d) runs a stage on %s", h.Kind, d, s, f.kinds[s])
	}
	f.taken[s], f.byTask[d] = true, h
	return s, nil
}

// distinct is the values of xs, each once, in their order.
func distinct(xs []string) []string {
	var out []string
	for _, x := range xs {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// collector drives a run's iterations from the coordinator.
type collector struct {
	ctl     *wire.Endpoint
	bulk    *wire.Endpoint    // the state streams' (stream.go)
	target  *checkpointTarget // where checkpoints go, nil for none
	job     *Job
	lay     replicas
	workers []int32 // by worker id: each one's control address
	res     *Result
	saved   int // the step of the newest checkpoint written, 0 for none
	// verdict is the rule at a step with values not finite (stage's,
	// which graphpipe train follows too), and its count of skips
	verdict stage.NonFinite
	// left says, by worker id, which workers have handed over all they
	// owed and gone, their silence no failure (shard.go, handover.go)
	left []atomic.Bool
	// sbHistory is the loss's stage's selective backprop history, as its
	// last checkpoint report gave it (Manifest.SBHistory)
	sbHistory []float64
	// goes is which iterations' go the workers have been told (goahead.go)
	goes goes
}

// collect drives the iterations and gathers reports and parameters.
func (c *collector) collect(ctx context.Context, progress func(int64, float64)) (*Result, error) {
	c.goes = newGoes(c.job)
	for n := c.job.From(); n < c.job.Steps; n++ {
		if c.goes.told < n { // a go told ahead stands (goahead.go)
			select {
			case <-c.job.Config.Stop:
				return nil, c.stop(ctx, n)
			default:
			}
		}
		if err := c.iteration(ctx, n, progress); err != nil {
			return nil, err
		}
	}
	if err := c.collectFinal(ctx); err != nil {
		return nil, err
	}
	return c.res, nil
}

// iteration runs iteration n: go, the reports, the verdict on its values,
// a due checkpoint.
func (c *collector) iteration(ctx context.Context, n int, progress func(int64, float64)) error {
	began := time.Now()
	if err := c.sayGo(ctx, n); err != nil {
		return err
	}
	total := 0.0
	bad, badStage := "", 0
	c.res.Events = make([][]Event, len(c.job.Plan.Stages))
	c.res.Links = make([][]LinkTime, len(c.workers))
	for s := range c.workers {
		r, err := c.ctl.Receive(ctx, msgKey(int64(n)*reportStride+int64(s), mbReport, ctlEdge, 'a'))
		if err != nil {
			return workerFailure(c.ctl, err)
		}
		var rep Report
		if err := json.Unmarshal(r, &rep); err != nil {
			return err
		}
		total += float64(rep.Loss)
		c.res.Links[s] = rep.Links
		if s == 0 && c.job.Options.Train.Selective != nil && !c.job.Options.Emulate {
			c.res.Backprop = append(c.res.Backprop, rep.Backprop)
			if c.job.Config.OnBackprop != nil {
				c.job.Config.OnBackprop(int64(n), rep.Backprop)
			}
		}
		if s == 0 && c.job.Options.Train.ClipGradNorm > 0 && !c.job.Options.Emulate {
			c.res.GradNorms = append(c.res.GradNorms, rep.GradNorm)
		}
		c.res.keepMemory(s, len(c.workers), rep.Memory)
		st, replica := c.lay.where(s)
		if rep.NonFinite != "" && bad == "" {
			bad, badStage = rep.NonFinite, st
		}
		if replica != 0 {
			continue
		}
		c.res.Events[st] = rep.Events
		if rep.OpSeconds != nil {
			if c.res.Ops == nil {
				c.res.Ops = make([]map[string][2]float64, len(c.job.Plan.Stages))
			}
			c.res.Ops[st] = rep.OpSeconds
		}
		if rep.DeviceCalls != nil {
			if c.res.DeviceCalls == nil {
				c.res.DeviceCalls = make([]*cuda.Counts, len(c.job.Plan.Stages))
			}
			c.res.DeviceCalls[st] = rep.DeviceCalls
		}
	}
	if bad == "" && !finite(total) {
		bad, badStage = fmt.Sprintf("the loss is %v", total), len(c.job.Plan.Stages)-1
	}
	c.res.Losses = append(c.res.Losses, total)
	c.res.Iters = append(c.res.Iters, time.Since(began).Seconds())
	if err := c.judge(ctx, n, bad, badStage); err != nil {
		return err
	}
	if progress != nil {
		progress(int64(n), total)
	}
	if c.job.Options.Data.EvalDue(n, c.job.Steps) && !c.job.Options.Emulate {
		r, err := collectEval(ctx, c.ctl, c.workers, n)
		if err != nil {
			return err
		}
		c.res.Evals = append(c.res.Evals, r)
		if c.job.Config.OnEval != nil {
			c.job.Config.OnEval(r)
		}
	}
	if k := c.job.Options.CheckpointEvery; k > 0 && (n+1)%k == 0 && !c.job.Options.Emulate {
		err := c.checkpoint(ctx, n+1, func(id int32) wire.Key { return msgKey(int64(n)*reportStride+int64(id), mbCkpt, ctlEdge, 'g') })
		var ne *NonFiniteError
		if errors.As(err, &ne) {
			c.tell(ctx, c.goes.untold(n+1), mbGo, goAbort)
		}
		return err
	}
	return nil
}

// judge acts on what the stages found of iteration n's values: bad says
// where the first stage found one not finite ("" if none). The run stops
// there, or, when steps may be skipped, every stage is told to step or to
// skip.
func (c *collector) judge(ctx context.Context, n int, bad string, badStage int) error {
	skipping := c.verdict.Skip
	v, skipped := c.verdict.Judge(bad)
	switch {
	case v == stage.StepOn && skipping:
		return c.tell(ctx, int64(n), mbVerdict, verdictStep)
	case v == stage.StepOn:
		return nil
	case v == stage.StopRun:
		e := c.nonFinite(n+1, badStage, bad)
		e.Skips = skipped
		if skipping {
			c.tell(ctx, int64(n), mbVerdict, goAbort)
		} else {
			c.tell(ctx, c.goes.untold(n+1), mbGo, goAbort)
		}
		return e
	}
	c.res.Skipped = append(c.res.Skipped, n)
	if f := c.job.Config.Skipped; f != nil {
		f(int64(n), fmt.Sprintf("stage %d, %s", badStage, bad))
	}
	return c.tell(ctx, int64(n), mbVerdict, verdictSkip)
}

// nonFinite is the error that ends the run at step (counted from 1).
func (c *collector) nonFinite(step, stage int, what string) *NonFiniteError {
	e := &NonFiniteError{Step: step, Stage: stage, What: what}
	if c.saved > 0 {
		e.Saved, e.Dir = c.saved, c.job.Config.CheckpointDir
	} else if c.job.Config.Resume != nil && !c.job.Options.Init {
		e.Resumed = c.job.From()
	}
	return e
}

// tell sends every worker one control message.
func (c *collector) tell(ctx context.Context, iter int64, mb int32, what string) error {
	for _, w := range c.workers {
		if err := c.ctl.Send(ctx, w, msgKey(iter, mb, ctlEdge, 'a'), []byte(what)); err != nil {
			return err
		}
	}
	return nil
}

// StoppedError is a run that stopped when asked (Config.Stop) after its
// iteration in flight: at Step (iterations done), with a checkpoint of that
// step in Dir (Config.CheckpointDir, "" for none) when Saved. Early says
// it stopped while it waited for its workers: it trained nothing since
// Step, so there was nothing to save, whatever Dir is.
type StoppedError struct {
	Step  int
	Dir   string
	Saved bool
	Early bool
}

// Error says what the stop left behind, as it is: the words "no
// --checkpoint" only when there was none.
func (e *StoppedError) Error() string {
	switch {
	case e.Saved:
		return fmt.Sprintf("stopped at step %d; checkpoint %s in %s; continue with --resume %s", e.Step, filepath.Base(stepDir("", e.Step)), e.Dir, e.Dir)
	case e.Early:
		return fmt.Sprintf("stopped at step %d while waiting for the workers; nothing new to save", e.Step)
	case e.Dir == "":
		return fmt.Sprintf("stopped at step %d; nothing saved (no --checkpoint)", e.Step)
	}
	return fmt.Sprintf("stopped at step %d; nothing saved in %s (an emulated run keeps no checkpoint)", e.Step, e.Dir)
}

// stop ends the run before iteration n, as Config.Stop asked: with a
// checkpoint at step n when the run keeps them and has none there yet.
func (c *collector) stop(ctx context.Context, n int) error {
	dir := c.job.Config.CheckpointDir
	save := dir != "" && !c.job.Options.Emulate && c.saved != n
	order := goStop
	if save {
		order = goStopAndSave
	}
	if err := c.tell(ctx, int64(n), mbGo, order); err != nil {
		return err
	}
	for id := range c.left {
		if _, replica := c.lay.where(id); replica != 0 || !save {
			c.left[id].Store(true) // it owes nothing more, and leaves
		}
	}
	if save {
		key := func(id int32) wire.Key { return msgKey(int64(id), mbStopState, ctlEdge, 'g') }
		if err := c.checkpoint(ctx, n, key); err != nil {
			return err
		}
	}
	return &StoppedError{Step: n, Dir: dir, Saved: c.saved == n && dir != ""}
}

// collectEval sums every worker's share of the evaluation after
// iteration n.
func collectEval(ctx context.Context, ctl *wire.Endpoint, workers []int32, n int) (stage.EvalResult, error) {
	var sums stage.EvalSums
	for s := range workers {
		msg, err := ctl.Receive(ctx, msgKey(int64(n)*reportStride+int64(s), mbEval, ctlEdge, 'a'))
		if err != nil {
			return stage.EvalResult{}, workerFailure(ctl, err)
		}
		var part stage.EvalSums
		if err := json.Unmarshal(msg, &part); err != nil {
			return stage.EvalResult{}, err
		}
		sums.Add(part)
	}
	return sums.Result(n + 1), nil
}

// workerFailure prefers a worker's own account of its failure.
func workerFailure(ctl *wire.Endpoint, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, msg, e := ctl.ReceiveAny(ctx, ctlEdge, 'a', mbError)
	if e != nil {
		return err
	}
	var m map[string]string
	json.Unmarshal(msg, &m)
	if m["data"] != "" {
		return &DataError{m["error"]}
	}
	return fmt.Errorf("a worker failed: %s", m["error"])
}

// checkpoint gathers every stage's share of the checkpoint at step
// (iterations done), each stage's replica 0 reporting under key (shard.go),
// and makes it whole: the shards checked, the manifest written last. A
// value that is not finite in it ends the run (a NonFiniteError) with
// nothing written.
func (c *collector) checkpoint(ctx context.Context, step int, key func(id int32) wire.Key) error {
	g, p, dir := c.job.Graph, c.job.Plan, c.job.Config.CheckpointDir
	tmp := tmpStepDir(c.target.Dir, step, c.target.Token, c.job.gen())
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return fmt.Errorf("checkpoint after step %d into %s: %w", step, dir, err)
	}
	shards, optStep, err := c.gatherShards(ctx, step, tmp, key)
	if err != nil {
		os.RemoveAll(tmp)
		var ne *NonFiniteError
		if errors.As(err, &ne) {
			return err
		}
		return fmt.Errorf("checkpoint after step %d into %s: %w", step, dir, err)
	}
	m := Manifest{Step: step, Model: g.Name(), ModelHash: dag.ModelHash(g), Run: c.job.Run, Seed: g.Seed(),
		Plan:      fmt.Sprintf("%s, %d stages on %d devices", p.Strategy, len(p.Stages), c.lay.total),
		Optimizer: c.job.Options.Train.Optimizer, OptStep: optStep, Shards: shards, Stages: len(p.Stages),
		SBHistory: c.sbHistory}
	if err := commitCheckpoint(c.target.Dir, tmp, &m); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("checkpoint after step %d into %s: %w", step, dir, err)
	}
	c.saved = step
	return nil
}

// cutState strips a state message entry's "param:" or "buffer:" prefix: a
// checkpoint holds parameters and buffers under their names, side by side.
func cutState(entry string) (string, bool) {
	if name, ok := strings.CutPrefix(entry, "param:"); ok {
		return name, true
	}
	return strings.CutPrefix(entry, "buffer:")
}
