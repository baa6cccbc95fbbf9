package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/profile"
	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/runtime/supervise"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

func newWorkerCmd() *cobra.Command {
	f := &workerFlags{}
	cmd := &cobra.Command{
		Use:   "worker --nats URL (--run ID | --pool NAME)",
		Short: "Join a run as a stage worker, or serve a pool of workers as an agent",
		Long: `Join run ID on a NATS server: take the stage the coordinator assigns, train
it, and leave when the run ends. With --pool NAME instead of --run, stay as an
agent of that pool: advertise this device and --host, train whatever stage a
coordinator ('graphpipe run --workers pool:NAME') assigns, and stay for the
next run. The token comes from --nats-token or $` + tokenEnv + `.`,
		Args: args(),
		RunE: func(cmd *cobra.Command, _ []string) error { return f.serve(cmd) },
	}
	f.register(cmd)
	return cmd
}

// workerFlags are graphpipe worker's flags: they make a runtime.Join (a
// worker of one run) or a supervise.Agent (of a pool). The run's settings
// come from its coordinator; these are the worker process's alone.
type workerFlags struct {
	nats        natsFlags
	device      deviceFlags
	runID       string
	gen         uint32
	quiet       bool
	connectWait time.Duration
	joinTimeout time.Duration
	managed     bool
	pool, host  string
	profile     string // --device-profile: a built-in profile's name or a profile file
	planDevice  int    // --plan-device: the plan's device a task's worker stands for, -1 for none
}

func (f *workerFlags) register(cmd *cobra.Command) {
	f.nats.register(cmd)
	f.device.registerWorker(cmd)
	fl := cmd.Flags()
	fl.BoolVar(&f.quiet, "quiet", false, "print nothing but errors (run's local workers)")
	fl.StringVar(&f.runID, "run", "", "the run to join")
	fl.StringVar(&f.pool, "pool", "", "serve this pool as a long-lived agent instead of joining one run")
	fl.StringVar(&f.host, "host", "", "with --pool: the host `LABEL` it advertises, which placement groups agents by (default: the host name)")
	fl.Uint32Var(&f.gen, "gen", 1, "the generation to join (restarts start new ones)")
	fl.BoolVar(&f.managed, "managed", false, "started by graphpipe run: leave SIGINT and SIGTERM to it")
	fl.MarkHidden("managed")
	fl.IntVar(&f.planDevice, "plan-device", -1, "with --run: join as this device of the plan (a task's worker: graphpipe run in a Slurm, torchrun or Kubernetes task starts it)")
	fl.MarkHidden("plan-device")
	fl.DurationVar(&f.connectWait, "connect-wait", 30*time.Second, "while no NATS server answers at --nats, keep trying this long (a worker may start before the server)")
	fl.DurationVar(&f.joinTimeout, "join-timeout", 10*time.Minute, "with --run: leave (exit 1) when no coordinator of the run has been heard for this long before it gives this worker a stage (0: wait for ever)")
	fl.StringVar(&f.profile, "device-profile", "", "the device profile this worker computes as (a built-in `NAME` or a profile file): on a plan of several device kinds (search --cluster) it takes a stage of that kind only, and an agent of a pool advertises it (default: cpu, or the GPU's nearest profile)")
}

// kind is the device profile's name --device-profile gives ("" if not set).
func (f *workerFlags) kind() (string, error) {
	if f.profile == "" {
		return "", nil
	}
	if d, err := plan.LookupDevice(f.profile); err == nil {
		return d.Name, nil
	}
	data, err := os.ReadFile(f.profile)
	if err != nil {
		return "", flagInputError("--device-profile", err)
	}
	d, err := plan.ParseDevice(data)
	if err != nil {
		return "", inputf("--device-profile %s: %v", f.profile, err)
	}
	return d.Name, nil
}

// serve joins the run, or serves the pool, until it ends.
func (f *workerFlags) serve(cmd *cobra.Command) error {
	if err := f.check(cmd); err != nil {
		return err
	}
	ctx := cmd.Context()
	if f.managed {
		// SIGINT and SIGTERM are the coordinator's to act on (it stops the
		// run after the step in flight); a terminal's Ctrl-C reaches its
		// whole process group, a Slurm job's warning (USR1, USR2) every
		// process of the job
		signal.Ignore(os.Interrupt, syscall.SIGTERM, syscall.SIGUSR1, syscall.SIGUSR2)
	} else {
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
	}
	dev, err := f.device.open()
	if err != nil {
		return err // exit 1: no such device or no driver
	}
	if dev != nil {
		defer dev.Close()
	}
	if f.connectWait < 0 {
		return usagef("--connect-wait: must be at least 0, got %v", f.connectWait)
	}
	t, err := f.dial(cmd, ctx)
	if err != nil {
		return dialError(err)
	}
	defer t.Close()
	bulk, err := wire.DialNATS(bulkOptions(f.nats.options(f.connName())))
	if err != nil {
		return dialError(err)
	}
	defer bulk.Close()
	return f.work(cmd, ctx, t, bulk, dev)
}

// check refuses flags that name no run and no pool, or both.
func (f *workerFlags) check(cmd *cobra.Command) error {
	if f.nats.url == "" || f.runID == "" && f.pool == "" {
		return usagef("worker needs --nats and --run (or --pool)")
	}
	if f.runID != "" && f.pool != "" {
		return usagef("--pool: an agent of a pool takes its runs from coordinators; leave out --run")
	}
	if f.pool != "" {
		if err := supervise.CheckPoolName(f.pool); err != nil {
			return usagef("--pool: %v", err)
		}
	} else if cmd.Flags().Changed("host") {
		return usagef("--host: labels an agent of a pool (--pool)")
	}
	if f.pool != "" && cmd.Flags().Changed("join-timeout") {
		return usagef("--join-timeout: an agent of a pool waits for coordinators for ever; it bounds a worker of one run (--run)")
	}
	if f.joinTimeout < 0 {
		return usagef("--join-timeout: must be at least 0, got %v", f.joinTimeout)
	}
	if err := f.nats.check(); err != nil {
		return err
	}
	if _, err := f.kind(); err != nil {
		return err
	}
	if f.runID != "" {
		return checkRunID(f.runID)
	}
	return nil
}

// dial connects to --nats, waiting up to --connect-wait for the server.
func (f *workerFlags) dial(cmd *cobra.Command, ctx context.Context) (*wire.NATS, error) {
	no := f.nats.options(f.connName())
	logConnection(&no, cmd.ErrOrStderr(), "graphpipe worker")
	return wire.DialNATSWaiting(ctx, no, f.connectWait, func(err error) {
		fmt.Fprintf(cmd.ErrOrStderr(), "graphpipe: %v: waiting up to %v for the server\n", err, f.connectWait)
	})
}

// connName is the name its NATS connections give the server.
func (f *workerFlags) connName() string {
	if f.pool != "" {
		return "graphpipe agent of pool " + f.pool
	}
	return "graphpipe worker " + f.runID
}

// work serves the pool as an agent, or joins the run, over t.
func (f *workerFlags) work(cmd *cobra.Command, ctx context.Context, t, bulk *wire.NATS, dev *cuda.Device) error {
	logf := workerLog(cmd.ErrOrStderr(), f.quiet)
	// the process's own: its device, precision, test hooks and its
	// connection for state streams
	c := runtime.Config{Device: dev, Precision: f.device.precision, Attention: f.device.attention, NoIPC: f.device.noIPC, KillPoints: os.Getenv(runtime.KillEnv),
		Bulk: bulk, StreamCheckpoints: os.Getenv(runtime.StreamEnv) == "1"}
	kind, err := f.kind()
	if err != nil {
		return err
	}
	if f.pool != "" {
		logf("connected to %s", t.ConnectedURL())
		profile := agentProfile(dev)
		if kind != "" {
			profile = kind
		}
		a := &supervise.Agent{Pool: f.pool, Host: f.host, Profile: profile, Memory: agentMemory(dev), Log: logf, Config: c}
		return a.Serve(ctx, t)
	}
	logf("connected to %s as a worker of run %s (generation %d), computing on %s; waiting for the coordinator to give it a stage", t.ConnectedURL(), f.runID, f.gen, deviceName(dev))
	c.JoinTimeout = f.joinTimeout
	j := runtime.Join{Run: f.runID, Gen: f.gen, Config: c, Log: logf, Kind: kind}
	if f.planDevice >= 0 {
		j.PlanDevice = &f.planDevice
	}
	return runtime.Serve(ctx, t, j)
}

// agentProfile is the device profile an agent advertises: cpu, or its GPU's
// nearest built-in profile ("" when none is near).
// agentMemory is the memory an agent advertises: its GPU's, or its
// host's for the CPU (and the emulator); 0 when unknown.
func agentMemory(dev *cuda.Device) int64 {
	if dev != nil && !dev.Emulated {
		return int64(dev.Memory)
	}
	return profile.HostMemory()
}

func agentProfile(dev *cuda.Device) string {
	if dev == nil || dev.Emulated {
		return "cpu"
	}
	name, _ := gpuProfile(dev.Name)
	return name
}
