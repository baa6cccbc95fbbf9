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
)

func newWorkerCmd() *cobra.Command {
	var nf natsFlags
	var df deviceFlags
	var runID string
	var gen uint32
	var quiet bool
	var connectWait time.Duration
	var managed bool
	cmd := &cobra.Command{
		Use:   "worker --nats URL --run ID",
		Short: "Join a run as a stage worker",
		Long: `Join run ID on a NATS server: take the stage the coordinator assigns, train
it, and leave when the run ends. The token comes from --nats-token or $` + tokenEnv + `.`,
		Args: args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nf.url == "" || runID == "" {
				return usagef("worker needs --nats and --run")
			}
			if err := nf.check(); err != nil {
				return err
			}
			if err := checkRunID(runID); err != nil {
				return err
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
			no := nf.options("graphpipe worker " + runID)
			logConnection(&no, cmd.ErrOrStderr(), "graphpipe worker")
			t, err := runtime.DialNATSWaiting(ctx, no, connectWait, func(err error) {
				fmt.Fprintf(cmd.ErrOrStderr(), "graphpipe: %v: waiting up to %v for the server\n", err, connectWait)
			})
			if err != nil {
				return err
			}
			defer t.Close()
			logf := workerLog(cmd.ErrOrStderr(), quiet)
			logf("connected to %s as a worker of run %s (generation %d), computing on %s; waiting for the coordinator to give it a stage", t.ConnectedURL(), runID, gen, deviceName(dev))
			return runtime.ServeLogged(ctx, t, runID, gen, dev, logf, runtime.WithPrecision(df.precision))
		},
	}
	nf.register(cmd)
	df.registerWorker(cmd)
	cmd.Flags().BoolVar(&quiet, "quiet", false, "print nothing but errors (run's local workers)")
	cmd.Flags().StringVar(&runID, "run", "", "the run to join")
	cmd.Flags().Uint32Var(&gen, "gen", 1, "the generation to join (restarts start new ones)")
	cmd.Flags().BoolVar(&managed, "managed", false, "started by graphpipe run: leave SIGINT and SIGTERM to it")
	cmd.Flags().MarkHidden("managed")
	cmd.Flags().DurationVar(&connectWait, "connect-wait", 30*time.Second, "while no NATS server answers at --nats, keep trying this long (a worker may start before the server)")
	return cmd
}
