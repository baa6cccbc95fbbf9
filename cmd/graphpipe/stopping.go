package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/runtime"
)

// exitDiverged is the exit status of a run or a training stopped by a loss,
// gradient or parameter that is not finite.
const exitDiverged = 3

// nonFiniteFlags are run's and train's --on-nonfinite and --max-skips.
type nonFiniteFlags struct {
	policy   string
	maxSkips int
}

func (f *nonFiniteFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.policy, "on-nonfinite", runtime.NonFiniteStop, "when a step's loss or gradients hold a NaN or an infinity: stop (exit 3, no checkpoint from that step) or skip (that step's update, on every stage)")
	cmd.Flags().IntVar(&f.maxSkips, "max-skips", 10, "with --on-nonfinite skip: stop (exit 3) after this many skipped steps in a row")
}

// check checks both flags, for train, which builds no runtime.Job (run's
// --on-nonfinite is Job.Validate's to check).
func (f *nonFiniteFlags) check() error {
	if f.policy != runtime.NonFiniteStop && f.policy != runtime.NonFiniteSkip {
		return usagef(`--on-nonfinite: must be "stop" or "skip", got %q`, f.policy)
	}
	return f.checkMaxSkips()
}

// checkMaxSkips refuses --max-skips 0, which the runtime would read as its
// default (runtime.Config.MaxSkips), and fewer.
func (f *nonFiniteFlags) checkMaxSkips() error {
	if f.maxSkips < 1 {
		return usagef("--max-skips: must be at least 1, got %d", f.maxSkips)
	}
	return nil
}

// signals turns SIGINT and SIGTERM, and the workload manager's warning
// (run --preempt-signal), into a graceful stop: the first closes stop (the
// run finishes its iteration in flight, checkpoints and exits with 128 +
// the signal), naming the signal once; a second cancels the returned
// context (the run stops at once), unless once: then later ones are only
// said (a Slurm job's warning may come to a task more than once: from
// slurmstepd, from srun and from the batch script passing it on).
// done stops listening.
type signals struct {
	stop   chan struct{}
	mu     sync.Mutex // guards first
	first  os.Signal
	cancel context.CancelCauseFunc
	ch     chan os.Signal
}

// watchSignals listens for SIGINT, SIGTERM and preempt.
func watchSignals(ctx context.Context, log io.Writer, preempt os.Signal, once bool) (context.Context, *signals) {
	ctx, cancel := context.WithCancelCause(ctx)
	s := &signals{stop: make(chan struct{}), cancel: cancel, ch: make(chan os.Signal, 4)}
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if preempt != nil && preempt != os.Interrupt && preempt != syscall.SIGTERM {
		sigs = append(sigs, preempt)
	}
	signal.Notify(s.ch, sigs...)
	go func() {
		select {
		case sig := <-s.ch:
			s.mu.Lock()
			s.first = sig
			s.mu.Unlock()
			if isTerminal(log) {
				fmt.Fprintln(log) // below the progress bar
			}
			again := " (send it again to stop at once)"
			if once {
				again = ""
			}
			fmt.Fprintf(log, "graphpipe: %s: finishing the step in flight, then stopping%s\n", signalName(sig), again)
			close(s.stop)
		case <-ctx.Done():
			return
		}
		for once {
			select {
			case sig := <-s.ch:
				fmt.Fprintf(log, "graphpipe: %s again: already stopping after the step in flight\n", signalName(sig))
			case <-ctx.Done():
				return
			}
		}
		select {
		case sig := <-s.ch:
			cancel(errors.New("stopped at once by a second signal"))
			// the run unwinds (workers killed, files closed) in far less;
			// whatever still holds it (a disk that does not answer) does
			// not hold the command past a second
			time.AfterFunc(stopAtOnce, func() {
				fmt.Fprintf(log, "graphpipe: %s again: stopped at once\n", signalName(sig))
				os.Exit(s.code())
			})
		case <-ctx.Done():
		}
	}()
	return ctx, s
}

// stopAtOnce is how long a second signal lets the run unwind before the
// process exits regardless.
const stopAtOnce = 800 * time.Millisecond

// done stops listening for signals.
func (s *signals) done() {
	signal.Stop(s.ch)
	s.cancel(nil)
}

// code is 128 + the first signal's number, or 0 if none came.
func (s *signals) code() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sig, ok := s.first.(syscall.Signal); ok {
		return 128 + int(sig)
	}
	return 0
}

func signalName(sig os.Signal) string {
	switch sig {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGUSR1:
		return "SIGUSR1"
	case syscall.SIGUSR2:
		return "SIGUSR2"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return sig.String()
}

// runExit gives the ways a run ends short of its steps their exit status:
// stopped by a signal (128 + it), diverged (exitDiverged).
func runExit(err error, sig *signals) error {
	var se *runtime.StoppedError
	var ne *runtime.NonFiniteError
	switch {
	case errors.As(err, &se):
		return &exitError{max(sig.code(), 1), se}
	case errors.As(err, &ne):
		return &exitError{exitDiverged, ne}
	case sig.code() != 0:
		return &exitError{sig.code(), err}
	}
	return err
}

// final says whether a generation's failure must not be met with a restart:
// a divergence (deterministic: it would diverge again) or a requested stop.
func final(err error) bool {
	var se *runtime.StoppedError
	var ne *runtime.NonFiniteError
	return errors.As(err, &se) || errors.As(err, &ne)
}

// jsonFloat is a float64 that encodes a NaN or an infinity as null, so that
// no JSON output fails on a step whose loss was not finite.
type jsonFloat float64

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	if v := float64(f); math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(f))
}

// lossList is losses with jsonFloat's encoding.
type lossList []float64

func (l lossList) MarshalJSON() ([]byte, error) {
	out := make([]jsonFloat, len(l))
	for i, v := range l {
		out[i] = jsonFloat(v)
	}
	return json.Marshal(out)
}

// MarshalJSON writes an evaluation whose loss is not finite with a null loss.
func (e evalJSON) MarshalJSON() ([]byte, error) {
	type plain evalJSON
	return json.Marshal(struct {
		plain
		Loss jsonFloat `json:"loss"`
	}{plain(e), jsonFloat(e.Loss)})
}

// finiteOrNil is v, or nil (omitted) when *v is not finite.
func finiteOrNil(v *float64) *float64 {
	if math.IsNaN(*v) || math.IsInf(*v, 0) {
		return nil
	}
	return v
}

// preemptSignals are the signals --preempt-signal may name.
var preemptSignals = map[string]syscall.Signal{"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "TERM": syscall.SIGTERM, "INT": syscall.SIGINT, "HUP": syscall.SIGHUP}

// parsePreempt reads --preempt-signal: USR1, USR2, TERM, INT or HUP, with
// or without SIG, or a number Slurm's --signal would take for one of them.
func parsePreempt(name string) (os.Signal, error) {
	n := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(name)), "SIG")
	if sig, ok := preemptSignals[n]; ok {
		return sig, nil
	}
	if v, err := strconv.Atoi(n); err == nil {
		for _, sig := range preemptSignals {
			if int(sig) == v {
				return sig, nil
			}
		}
	}
	return nil, usagef("--preempt-signal: %q: want USR1, USR2, TERM, INT or HUP (Slurm's --signal=B:USR1@120 names it)", name)
}
