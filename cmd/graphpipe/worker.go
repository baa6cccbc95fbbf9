package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

func newWorkerCmd() *cobra.Command {
	var nf natsFlags
	var df deviceFlags
	var runID string
	var gen uint32
	var quiet bool
	var connectWait time.Duration
	var managed bool
	var pool, host string
	cmd := &cobra.Command{
		Use:   "worker --nats URL (--run ID | --pool NAME)",
		Short: "Join a run as a stage worker, or serve a pool of workers as an agent",
		Long: `Join run ID on a NATS server: take the stage the coordinator assigns, train
it, and leave when the run ends. With --pool NAME instead of --run, stay as an
agent of that pool: advertise this device and --host, train whatever stage a
coordinator ('graphpipe run --workers pool:NAME') assigns, and stay for the
next run. The token comes from --nats-token or $` + tokenEnv + `.`,
		Args: args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nf.url == "" || runID == "" && pool == "" {
				return usagef("worker needs --nats and --run (or --pool)")
			}
			if runID != "" && pool != "" {
				return usagef("--pool: an agent of a pool takes its runs from coordinators; leave out --run")
			}
			if pool != "" {
				if err := runtime.CheckPoolName(pool); err != nil {
					return usagef("--pool: %v", err)
				}
			} else if cmd.Flags().Changed("host") {
				return usagef("--host: labels an agent of a pool (--pool)")
			}
			if err := nf.check(); err != nil {
				return err
			}
			if runID != "" {
				if err := checkRunID(runID); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			if managed {
				// SIGINT and SIGTERM are the coordinator's to act on
				// (it stops the run after the step in flight); a
				// terminal's Ctrl-C reaches its whole process group
				signal.Ignore(os.Interrupt, syscall.SIGTERM)
			} else {
				var stop context.CancelFunc
				ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
				defer stop()
			}
			dev, err := df.open()
			if err != nil {
				return err // exit 1: no such device or no driver
			}
			if dev != nil {
				defer dev.Close()
			}
			if connectWait < 0 {
				return usagef("--connect-wait: must be at least 0, got %v", connectWait)
			}
			name := "graphpipe worker " + runID
			if pool != "" {
				name = "graphpipe agent of pool " + pool
			}
			no := nf.options(name)
			logConnection(&no, cmd.ErrOrStderr(), "graphpipe worker")
			t, err := wire.DialNATSWaiting(ctx, no, connectWait, func(err error) {
				fmt.Fprintf(cmd.ErrOrStderr(), "graphpipe: %v: waiting up to %v for the server\n", err, connectWait)
			})
			if err != nil {
				return err
			}
			defer t.Close()
			logf := workerLog(cmd.ErrOrStderr(), quiet)
			if pool != "" {
				logf("connected to %s", t.ConnectedURL())
				a := &runtime.Agent{Pool: pool, Host: host, Device: dev, Profile: agentProfile(dev), Log: logf,
					Options: []runtime.WorkerOption{runtime.WithPrecision(df.precision)}}
				return a.Serve(ctx, t)
			}
			logf("connected to %s as a worker of run %s (generation %d), computing on %s; waiting for the coordinator to give it a stage", t.ConnectedURL(), runID, gen, deviceName(dev))
			return runtime.ServeLogged(ctx, t, runID, gen, dev, logf, runtime.WithPrecision(df.precision))
		},
	}
	nf.register(cmd)
	df.registerWorker(cmd)
	cmd.Flags().BoolVar(&quiet, "quiet", false, "print nothing but errors (run's local workers)")
	cmd.Flags().StringVar(&runID, "run", "", "the run to join")
	cmd.Flags().StringVar(&pool, "pool", "", "serve this pool as a long-lived agent instead of joining one run")
	cmd.Flags().StringVar(&host, "host", "", "with --pool: the host `LABEL` it advertises, which placement groups agents by (default: the host name)")
	cmd.Flags().Uint32Var(&gen, "gen", 1, "the generation to join (restarts start new ones)")
	cmd.Flags().BoolVar(&managed, "managed", false, "started by graphpipe run: leave SIGINT and SIGTERM to it")
	cmd.Flags().MarkHidden("managed")
	cmd.Flags().DurationVar(&connectWait, "connect-wait", 30*time.Second, "while no NATS server answers at --nats, keep trying this long (a worker may start before the server)")
	return cmd
}

// agentProfile is the device profile an agent advertises: cpu, or its GPU's
// nearest built-in profile ("" when none is near).
func agentProfile(dev *cuda.Device) string {
	if dev == nil || dev.Emulated {
		return "cpu"
	}
	name, _ := gpuProfile(dev.Name)
	return name
}
