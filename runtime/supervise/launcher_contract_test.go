package supervise

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
)

// The launcher contract (doc.go's first duty), which every Launcher runs
// (TestLaunchers), modelled on gonum's testgraph: the suite is one function
// over a harness that makes the implementation under test.
//
//  1. Start brings up one worker per slot of the generation's plan, each
//     joining that generation: the coordinator's run trains to its end.
//  2. Stop after a run that ended returns, and the next generation of the
//     same launcher starts and trains (a launcher may be asked for any
//     number of generations).
//  3. Stop of a failed generation returns with its workers ended or
//     ending, and the next generation still starts and trains.
//  4. A launcher that can see its workers (a process, an agent) reports one
//     lost mid-generation through Generation.Lost, within seconds.
//  5. Close returns once the run is over.

// launcherHarness makes one implementation under test.
type launcherHarness struct {
	// mk makes the launcher for a subtest: its workers reach the coordinator
	// through srv, where its transport tr is connected.
	mk func(t *testing.T, srv *wire.Embedded, tr wire.Transport) Launcher
	// lose makes a worker of gen die after it joined, as a killed process
	// or host would; nil when the launcher cannot see its workers (they
	// are started elsewhere: the coordinator's heartbeats find the loss).
	lose func(t *testing.T, l Launcher, gen *Generation)
}

// TestLaunchers runs the launcher contract on every Launcher: worker
// processes of this host (this test binary, as TestMain runs it), workers
// started elsewhere (goroutines here, as the announcement says), and the
// agents of a pool.
func TestLaunchers(t *testing.T) {
	for name, h := range map[string]launcherHarness{
		"Local":    localHarness(),
		"External": externalHarness(),
		"Pool":     poolHarness(),
		"Tasks":    tasksHarness(),
	} {
		t.Run(name, func(t *testing.T) { testLauncher(t, h) })
	}
}

// testLauncher is the contract suite.
func testLauncher(t *testing.T, h launcherHarness) {
	for _, c := range []struct {
		name string
		run  func(c *contractRun)
	}{
		{"TrainsAGeneration", (*contractRun).trainsAGeneration},
		{"RunsTheNextGeneration", (*contractRun).runsTheNextGeneration},
		{"StopsAFailedGeneration", (*contractRun).stopsAFailedGeneration},
		{"ReportsALostWorker", (*contractRun).reportsALostWorker},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.run(newContractRun(t, h))
		})
	}
}

// contractRun is one subtest's server, coordinator transport, launcher and
// plan.
type contractRun struct {
	t    *testing.T
	h    launcherHarness
	l    Launcher
	tr   wire.Transport
	job  runtime.Job
	ctx  context.Context
	want int // the plan's workers
}

func newContractRun(t *testing.T, h launcherHarness) *contractRun {
	srv, err := wire.StartEmbedded(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	tr := dialServer(t, srv, "coordinator")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	g, p := smallPlan(t, "mlp", 2, 8)
	run := strings.NewReplacer("/", "-", "#", "-").Replace(t.Name())
	job := runtime.Job{Run: run, Graph: g, Plan: p, Steps: 3, Options: runtime.Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.05}},
		Config: runtime.Config{Timings: shortTimings(), JoinTimeout: 60 * time.Second}}
	return &contractRun{t: t, h: h, l: h.mk(t, srv, tr), tr: tr, job: job, ctx: ctx, want: runtime.Workers(p)}
}

// generation is the n-th generation of the run.
func (c *contractRun) generation(n uint32) *Generation {
	return &Generation{Run: c.job.Run, Gen: n, Plan: c.job.Plan, Slots: Slots(c.job.Plan)}
}

// train starts gen and coordinates it to the end: the launcher's workers
// must all join and train every step.
func (c *contractRun) train(gen *Generation) {
	c.t.Helper()
	ctx, fail := context.WithCancelCause(c.ctx)
	defer fail(nil)
	gen.Lost = fail
	if err := c.l.Start(ctx, gen); err != nil {
		c.t.Fatalf("generation %d: start: %v", gen.Gen, err)
	}
	job := c.job
	job.Config.Gen = gen.Gen
	res, err := runtime.Coordinate(ctx, &job, c.tr, nil)
	if err != nil {
		c.t.Fatalf("generation %d: %v (cause %v)", gen.Gen, err, context.Cause(ctx))
	}
	if len(res.Losses) != job.Steps || len(res.Joined) != c.want {
		c.t.Fatalf("generation %d: %d steps by %d workers, want %d by %d", gen.Gen, len(res.Losses), len(res.Joined), job.Steps, c.want)
	}
	c.stop(gen, false)
}

// stop calls Stop, which must return.
func (c *contractRun) stop(gen *Generation, failed bool) {
	c.t.Helper()
	done := make(chan struct{})
	go func() {
		c.l.Stop(gen, failed)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		c.t.Fatalf("generation %d: Stop (failed %v) did not return", gen.Gen, failed)
	}
}

func (c *contractRun) close() {
	c.t.Helper()
	if err := c.l.Close(); err != nil {
		c.t.Fatalf("close: %v", err)
	}
}

// trainsAGeneration: duties 1 and 5.
func (c *contractRun) trainsAGeneration() {
	c.train(c.generation(1))
	c.close()
}

// runsTheNextGeneration: duty 2.
func (c *contractRun) runsTheNextGeneration() {
	c.train(c.generation(1))
	c.train(c.generation(2))
	c.close()
}

// stopsAFailedGeneration: duty 3. The first generation fails after its
// first iteration (its coordinator gives up), is stopped as failed, and the
// next one trains.
func (c *contractRun) stopsAFailedGeneration() {
	t := c.t
	gen := c.generation(1)
	ctx, fail := context.WithCancelCause(c.ctx)
	gen.Lost = fail
	if err := c.l.Start(ctx, gen); err != nil {
		t.Fatalf("start: %v", err)
	}
	job := c.job
	job.Steps, job.Config.Gen = 1000, 1
	errFailed := errors.New("the test fails the generation")
	_, err := runtime.Coordinate(ctx, &job, c.tr, func(iter int64, _ float64) {
		if iter == 0 {
			fail(errFailed)
		}
	})
	if err == nil || !errors.Is(context.Cause(ctx), errFailed) {
		t.Fatalf("the generation ended with %v (cause %v), want the test's failure", err, context.Cause(ctx))
	}
	c.stop(gen, true)
	c.train(c.generation(2))
	c.close()
}

// reportsALostWorker: duty 4.
func (c *contractRun) reportsALostWorker() {
	t := c.t
	if c.h.lose == nil {
		t.Skip("the launcher cannot see its workers: the coordinator's heartbeats find a loss")
	}
	gen := c.generation(1)
	ctx, fail := context.WithCancelCause(c.ctx)
	defer fail(nil)
	lost := make(chan error, 8)
	gen.Lost = func(err error) {
		select {
		case lost <- err:
		default:
		}
	}
	if err := c.l.Start(ctx, gen); err != nil {
		t.Fatalf("start: %v", err)
	}
	job := c.job
	job.Steps, job.Config.Gen = 1000, 1
	trained := make(chan struct{})
	var once sync.Once
	go runtime.Coordinate(ctx, &job, c.tr, func(int64, float64) { once.Do(func() { close(trained) }) })
	select {
	case <-trained:
	case <-ctx.Done():
		t.Fatal("no iteration trained")
	}
	began := time.Now()
	c.h.lose(t, c.l, gen)
	select {
	case err := <-lost:
		t.Logf("lost after %v: %v", time.Since(began).Round(time.Millisecond), err)
	case <-time.After(15 * time.Second):
		t.Fatal("a lost worker was not reported within 15 s")
	}
	fail(errors.New("a worker was lost"))
	c.stop(gen, true)
	c.close()
}

// dialServer is a connection to srv, closed when the test ends.
func dialServer(t *testing.T, srv *wire.Embedded, name string) *wire.NATS {
	t.Helper()
	n, err := wire.DialNATS(wire.NATSOptions{URL: srv.URL(), Token: srv.Token, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// testWorkerEnv, set to a directory, makes this test binary a worker
// process (TestMain): the LocalLauncher's, which writes its pid there.
const testWorkerEnv = "GRAPHPIPE_SUPERVISE_TEST_WORKER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(testWorkerEnv); dir != "" {
		os.Exit(testWorker(dir, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// testWorker is `graphpipe worker --quiet --nats URL --run ID --gen N
// --managed [--plan-device D]`, as LocalLauncher (and a TaskLauncher's
// Worker) starts it, the token in TokenEnv.
func testWorker(dir string, args []string) int {
	flags := map[string]string{}
	for i := 0; i+1 < len(args); i++ {
		if strings.HasPrefix(args[i], "--") {
			flags[args[i]] = args[i+1]
		}
	}
	gen, _ := strconv.Atoi(flags["--gen"])
	var device *int
	if d, err := strconv.Atoi(flags["--plan-device"]); err == nil {
		device = &d
	}
	os.WriteFile(filepath.Join(dir, strconv.Itoa(os.Getpid())), nil, 0o644)
	n, err := wire.DialNATS(wire.NATSOptions{URL: flags["--nats"], Token: os.Getenv(TokenEnv)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer n.Close()
	if err := runtime.Serve(context.Background(), n, runtime.Join{Run: flags["--run"], Gen: uint32(gen), PlanDevice: device}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// localHarness: LocalLauncher starts this test binary as its workers; a
// worker is lost by SIGKILL.
func localHarness() launcherHarness {
	var mu sync.Mutex // guards dirs
	dirs := map[Launcher]string{}
	return launcherHarness{
		mk: func(t *testing.T, srv *wire.Embedded, _ wire.Transport) Launcher {
			dir := t.TempDir()
			l := &LocalLauncher{URL: srv.URL(), Log: os.Stderr, Env: func(int) []string {
				return append(os.Environ(), TokenEnv+"="+srv.Token, testWorkerEnv+"="+dir)
			}}
			mu.Lock()
			dirs[l] = dir
			mu.Unlock()
			return l
		},
		lose: func(t *testing.T, l Launcher, _ *Generation) {
			mu.Lock()
			dir := dirs[l]
			mu.Unlock()
			pids, err := os.ReadDir(dir)
			if err != nil || len(pids) == 0 {
				t.Fatalf("no worker wrote its pid in %s: %v", dir, err)
			}
			pid, _ := strconv.Atoi(pids[0].Name())
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatalf("kill %d: %v", pid, err)
			}
		},
	}
}

// externalHarness: the announcement starts the generation's workers here,
// as a user would elsewhere.
func externalHarness() launcherHarness {
	return launcherHarness{
		mk: func(t *testing.T, srv *wire.Embedded, _ wire.Transport) Launcher {
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			return &ExternalLauncher{Announce: func(gen *Generation) {
				for range gen.Slots {
					n := dialServer(t, srv, "external worker")
					go runtime.Serve(ctx, n, runtime.Join{Run: gen.Run, Gen: gen.Gen})
				}
			}}
		},
	}
}

// poolHarness: a pool of as many agents as the plan has workers, each on
// its own connection; a worker is lost with its agent, which stops (its
// adverts fall silent, as a killed host's would).
func poolHarness() launcherHarness {
	var mu sync.Mutex // guards agents
	agents := map[string]context.CancelFunc{}
	return launcherHarness{
		mk: func(t *testing.T, srv *wire.Embedded, tr wire.Transport) Launcher {
			pool := fmt.Sprintf("contract%d", time.Now().UnixNano())
			for i := range 2 {
				ctx, cancel := context.WithCancel(context.Background())
				t.Cleanup(cancel)
				a := &Agent{Pool: pool, Host: "h", Profile: "cpu", Config: runtime.Config{Timings: shortTimings()}}
				go a.Serve(ctx, dialServer(t, srv, fmt.Sprint("agent ", i)))
				go func() {
					for a.ID() == "" && ctx.Err() == nil {
						time.Sleep(time.Millisecond)
					}
					mu.Lock()
					agents[a.ID()] = cancel
					mu.Unlock()
				}()
			}
			l, err := NewPoolLauncher(tr, PoolConfig{Pool: pool, JoinTimeout: 30 * time.Second, Timings: shortTimings()})
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
		lose: func(t *testing.T, l Launcher, gen *Generation) {
			ad := l.(*PoolLauncher).Placed(gen.Gen)[0]
			mu.Lock()
			stop := agents[ad.Agent]
			mu.Unlock()
			if stop == nil {
				t.Fatalf("no agent %s", ad.Agent)
			}
			stop()
		},
	}
}

// tasksHarness: a TaskLauncher whose tasks are goroutines here, task 0's
// own device a worker process (this test binary), as are the workers it
// starts in the place of a lost task; a task is lost when it stops (its
// adverts fall silent, as a killed task's would). The plan's two devices
// are one node's, a task each.
func tasksHarness() launcherHarness {
	var mu sync.Mutex // guards tasks
	tasks := map[Launcher][]context.CancelFunc{}
	return launcherHarness{
		mk: func(t *testing.T, srv *wire.Embedded, tr wire.Transport) Launcher {
			run := strings.NewReplacer("/", "-", "#", "-").Replace(t.Name())
			env := func(rank int) *TaskEnv {
				return &TaskEnv{Source: "test", RankVar: "RANK", TasksVar: "WORLD_SIZE", PerNodeVar: "LOCAL_WORLD_SIZE",
					Rank: rank, Tasks: 2, Local: rank, Nodes: 1, PerNode: 2, GPU: -1, Key: run}
			}
			dir := t.TempDir()
			l, err := NewTaskLauncher(tr, run, TaskConfig{Env: env(0), Replace: true, JoinTimeout: 30 * time.Second, Timings: shortTimings(), Log: os.Stderr,
				Worker: func(ctx context.Context, w TaskWorker) (*exec.Cmd, error) {
					self, err := os.Executable()
					if err != nil {
						return nil, err
					}
					c := exec.CommandContext(ctx, self, "worker", "--nats", srv.URL(), "--run", w.Run, "--gen", fmt.Sprint(w.Gen), "--plan-device", fmt.Sprint(w.Device))
					c.Env, c.Stderr = append(os.Environ(), TokenEnv+"="+srv.Token, testWorkerEnv+"="+dir), os.Stderr
					return c, nil
				}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			k := &Task{Env: env(1), Run: run, Host: "h1", Config: runtime.Config{Timings: shortTimings(), JoinTimeout: 30 * time.Second}}
			go k.Serve(ctx, dialServer(t, srv, "task 1"))
			mu.Lock()
			tasks[l] = append(tasks[l], cancel)
			mu.Unlock()
			return l
		},
		lose: func(t *testing.T, l Launcher, _ *Generation) {
			mu.Lock()
			stop := tasks[l][0]
			mu.Unlock()
			stop()
		},
	}
}
