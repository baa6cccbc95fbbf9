package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
)

// TestCoordinatorWithJoiningWorkers: workers that know only the server and
// the run ID join, are given stages, train, and hand back the parameters of
// the in-process run.
func TestCoordinatorWithJoiningWorkers(t *testing.T) {
	srv, err := wire.StartEmbedded(0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	g, plan := smallPlan(t, "case-study", 3, 4)
	o := Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.05}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	want, err := RunLocal(ctx, &Job{Run: "ref", Graph: g, Plan: plan, Steps: 4, Options: o}, wire.NewMemory(1, wire.Faults{}, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	dial := func() wire.Transport { return dialEmbedded(t, srv) }
	errs := make(chan error, len(plan.Stages))
	for range plan.Stages {
		go func() { errs <- Serve(ctx, dial(), Join{Run: "joined"}) }()
	}
	var iters []int64
	res, err := Coordinate(ctx, &Job{Run: "joined", Graph: g, Plan: plan, Steps: 4, Options: o}, dial(), func(n int64, _ float64) { iters = append(iters, n) })
	if err != nil {
		t.Fatal(err)
	}
	for range plan.Stages {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	equalParams(t, res.Params, want.Params, 0)
	if len(iters) != 4 || len(res.Losses) != 4 || res.Losses[0] != want.Losses[0] {
		t.Errorf("progress %v, losses %v vs %v", iters, res.Losses, want.Losses)
	}
}

// TestCoordinatorStopsWhenAsked: Config.Stop closed during iteration 2
// ends the run after it: every worker leaves cleanly, the coordinator
// returns a StoppedError at step 3 and the checkpoint it wrote there
// resumes to the parameters of an uninterrupted run, bit for bit.
func TestCoordinatorStopsWhenAsked(t *testing.T) {
	srv, err := wire.StartEmbedded(0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	g, plan := smallPlan(t, "case-study", 3, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	o := Options{Train: stage.TrainOptions{Optimizer: "adam", LR: 1e-3}}
	want, err := RunLocal(ctx, &Job{Run: "ref", Graph: g, Plan: plan, Steps: 5, Options: o}, wire.NewMemory(1, wire.Faults{}, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	dial := func() wire.Transport { return dialEmbedded(t, srv) }
	var logMu sync.Mutex // guards said
	var said []string
	logf := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		said = append(said, fmt.Sprintf(format, args...))
	}
	serve := func(run string) chan error {
		errs := make(chan error, len(plan.Stages))
		for range plan.Stages {
			go func() { errs <- Serve(ctx, dial(), Join{Run: run, Log: logf}) }()
		}
		return errs
	}
	join := func(errs chan error) {
		for range plan.Stages {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	stop := make(chan struct{})
	c := Config{CheckpointDir: t.TempDir(), Stop: stop}
	errs := serve("stopped")
	_, err = Coordinate(ctx, &Job{Run: "stopped", Graph: g, Plan: plan, Steps: 5, Options: o, Config: c}, dial(), func(n int64, _ float64) {
		if n == 2 {
			close(stop)
		}
	})
	var se *StoppedError
	if !errors.As(err, &se) || se.Step != 3 || !se.Saved || se.Dir != c.CheckpointDir {
		t.Fatalf("got %v (%+v), want a stop at step 3 with a checkpoint", err, se)
	}
	join(errs)
	logMu.Lock()
	ends := 0
	for _, l := range said {
		if strings.Contains(l, "done") || strings.Contains(l, "stopped at step") && l != "run stopped stopped at step 3: trained steps 1 to 3" {
			t.Errorf("a stopped worker said %q", l)
		}
		if strings.Contains(l, "stopped at step") {
			ends++
		}
	}
	if ends != len(plan.Stages) {
		t.Errorf("%d workers said where they stopped, want %d: %q", ends, len(plan.Stages), said)
	}
	logMu.Unlock()
	ck, err := LoadCheckpoint(c.CheckpointDir, nil)
	if err != nil || ck.Manifest.Step != 3 || ck.Manifest.Run != "stopped" {
		t.Fatalf("checkpoint: %v %+v", err, ck)
	}
	errs = serve("resumed")
	res, err := Coordinate(ctx, &Job{Run: "resumed", Graph: g, Plan: plan, Steps: 5, Options: o, Config: Config{Resume: ck}}, dial(), nil)
	if err != nil {
		t.Fatal(err)
	}
	join(errs)
	equalParams(t, res.Params, want.Params, 0)
}

// TestCoordinatorGivesTasksTheirDevices: tasks an environment started
// (Join.PlanDevice) join in the reverse of the plan's device order and
// each is given the worker of its own device.
func TestCoordinatorGivesTasksTheirDevices(t *testing.T) {
	srv, err := wire.StartEmbedded(0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	g, plan := smallPlan(t, "case-study", 3, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dial := func() wire.Transport { return dialEmbedded(t, srv) }
	errs := make(chan error, plan.Devices)
	for d := plan.Devices - 1; d >= 0; d-- {
		go func() {
			errs <- Serve(ctx, dial(), Join{Run: "tasks", Host: fmt.Sprint("task-of-device-", d), PlanDevice: &d})
		}()
		time.Sleep(20 * time.Millisecond) // join in this order
	}
	res, err := Coordinate(ctx, &Job{Run: "tasks", Graph: g, Plan: plan, Steps: 2, Options: Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.05}}}, dial(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for range plan.Devices {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for s, st := range plan.Stages {
		for r, d := range st.Devices {
			id := layout(plan).id(s, r)
			if want := fmt.Sprint("task-of-device-", d); res.Joined[id].Host != want {
				t.Errorf("worker %d (stage %d, replica %d, device %d) was %s", id, s, r, d, res.Joined[id].Host)
			}
		}
	}
}

// TestFreeSlotsRefuse: a task standing for a device no stage runs on, or
// for one another task already stands for, or of another kind than the
// stage on its device, is refused, naming the device.
func TestFreeSlotsRefuse(t *testing.T) {
	_, plan := smallPlan(t, "case-study", 3, 4)
	dev := func(d int) hello { return hello{Worker: 7, Host: "h", PID: 1, PlanDevice: &d} }
	kind := func(h hello, k string) hello { h.Kind = k; return h }
	for _, tc := range []struct {
		name  string
		hello []hello
		kinds bool   // every stage on kind cpu, of a plan of several kinds
		want  string // the last hello's refusal
	}{
		{"beyond the plan", []hello{dev(plan.Devices)}, false, fmt.Sprintf("stands for device %d of the plan, which runs no stage on it", plan.Devices)},
		{"twice", []hello{dev(1), dev(1)}, false, "two tasks stand for device 1 of the plan: host h pid 1 and host h pid 1"},
		{"another kind", []hello{kind(dev(1), "a100")}, true, "computes as a100, but device 1 of the plan"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFreeSlots(plan, layout(plan))
			if tc.kinds {
				f.kinds = make([]string, len(f.taken))
				for s := range f.kinds {
					f.kinds[s] = "cpu"
				}
			}
			var err error
			for _, h := range tc.hello {
				_, err = f.take(h)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// TestCoordinatorStoppedWhileWaiting: Config.Stop closed while the
// coordinator waits for its workers ends the wait at once with a
// StoppedError that says nothing trained, and does not say "no
// --checkpoint" of a run that has a checkpoint directory.
func TestCoordinatorStoppedWhileWaiting(t *testing.T) {
	g, plan := smallPlan(t, "case-study", 3, 4)
	stop := make(chan struct{})
	close(stop)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dir := t.TempDir()
	_, err := Coordinate(ctx, &Job{Run: "waiting", Graph: g, Plan: plan, Steps: 5, Config: Config{CheckpointDir: dir, Stop: stop}},
		wire.NewMemory(1, wire.Faults{}, 1<<20), nil)
	var se *StoppedError
	if !errors.As(err, &se) || !se.Early || se.Saved || se.Dir != dir {
		t.Fatalf("got %v (%+v), want an early stop", err, se)
	}
	if want := "stopped at step 0 while waiting for the workers; nothing new to save"; err.Error() != want {
		t.Fatalf("said %q, want %q", err, want)
	}
}

// TestStoppedErrorWords: a stop says what it left, and names --checkpoint
// as missing only when it was.
func TestStoppedErrorWords(t *testing.T) {
	for _, tc := range []struct {
		e    StoppedError
		want string
	}{
		{StoppedError{Step: 7}, "stopped at step 7; nothing saved (no --checkpoint)"},
		{StoppedError{Step: 7, Dir: "ck", Saved: true}, "stopped at step 7; checkpoint step-00000007 in ck; continue with --resume ck"},
		{StoppedError{Step: 7, Dir: "ck", Early: true}, "stopped at step 7 while waiting for the workers; nothing new to save"},
		{StoppedError{Step: 0, Early: true}, "stopped at step 0 while waiting for the workers; nothing new to save"},
		{StoppedError{Step: 7, Dir: "ck"}, "stopped at step 7; nothing saved in ck (an emulated run keeps no checkpoint)"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.e, got, tc.want)
		}
	}
}

// TestCoordinatorTakesPlacedAgentsOnly: with Config.Agents, a hello for a
// worker id from an agent not placed there (one whose confirmation came
// after its offer was taken back, and which joined anyway) is not taken:
// the run trains on the placed agents, and the late one is never assigned.
// Without the check the late hello takes worker 0, and the placed agent's
// is refused as taken.
func TestCoordinatorTakesPlacedAgentsOnly(t *testing.T) {
	srv, err := wire.StartEmbedded(0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	g, plan := smallPlan(t, "case-study", 2, 4)
	o := Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.05}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want, err := RunLocal(ctx, &Job{Run: "ref", Graph: g, Plan: plan, Steps: 3, Options: o}, wire.NewMemory(1, wire.Faults{}, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	dial := func() wire.Transport { return dialEmbedded(t, srv) }
	lateCtx, endLate := context.WithCancel(ctx)
	defer endLate()
	late := make(chan error, 1)
	zero, one := 0, 1
	go func() { late <- Serve(lateCtx, dial(), Join{Run: "placed", Slot: &zero, Agent: "late00000000"}) }()
	type result struct {
		res *Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := Coordinate(ctx, &Job{Run: "placed", Graph: g, Plan: plan, Steps: 3, Options: o,
			Config: Config{Agents: []string{"agent0000000", "agent1111111"}}}, dial(), nil)
		done <- result{res, err}
	}()
	time.Sleep(300 * time.Millisecond) // the late hello is in first
	errs := make(chan error, 2)
	for _, w := range []struct {
		slot  *int
		agent string
	}{{&zero, "agent0000000"}, {&one, "agent1111111"}} {
		go func() { errs <- Serve(ctx, dial(), Join{Run: "placed", Slot: w.slot, Agent: w.agent}) }()
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	equalParams(t, r.res.Params, want.Params, 0)
	for i, j := range r.res.Joined {
		if want := []string{"agent0000000", "agent1111111"}[i]; j.Agent != want {
			t.Errorf("worker %d ran on agent %q, want %q", i, j.Agent, want)
		}
	}
	select {
	case err := <-late:
		t.Fatalf("the late agent's worker ended while unassigned: %v", err)
	default:
	}
	endLate()
	<-late
}
