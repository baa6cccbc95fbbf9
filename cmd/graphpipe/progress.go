package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/graphpipe/graphpipe/stage"
)

// progress reports a run's steps as they end: on a terminal, a bar redrawn
// in place at every step; otherwise a line for the first step of a
// generation, every --log-every steps and the last; and, with --metrics, one
// JSON line per logged step. Rates and the ETA count the steps this
// generation ran since it started (from a checkpoint, after --resume or a
// restart), not the step number.
type progress struct {
	log      io.Writer
	bar      bool // a terminal: one line redrawn in place
	quiet    bool // --json: no lines on the log
	every    int  // log every that many steps (1: each)
	steps    int  // the run's last step
	batch    int64
	emulated bool // no loss to show: an emulated run computes none
	metrics  io.Writer
	now      func() time.Time
	lr       func(step int) float64 // the learning rate at a step (0-based); nil: none shown

	from       int       // the step this generation started from
	began      time.Time // when it started
	lastEval   string    // the latest evaluation, for the lines after it
	skips      int       // this generation's skipped steps (--on-nonfinite skip)
	kept       string    // the step's samples with a backward pass (--selective-backprop), for its line
	metricsErr error     // the first failure to write --metrics; no more lines after it
}

// logEvery is --log-every's default: about ten lines a run.
func logEvery(flag, steps int) int {
	if flag > 0 {
		return flag
	}
	return max(1, steps/10)
}

// start begins a generation at step from (0, or a checkpoint's step).
func (p *progress) start(from int) {
	if p.now == nil {
		p.now = time.Now
	}
	p.from, p.began, p.skips = from, p.now(), 0
	if p.emulated && !p.quiet && from == 0 {
		fmt.Fprintln(p.log, "emulated devices: every op and transfer waits its modelled time; no loss is computed")
	}
}

// metricsLine is one line of --metrics: a logged step, or an evaluation
// (with --eval-data; its eval_ fields alone).
type metricsLine struct {
	Format       string   `json:"format"` // metricsFormat
	Time         string   `json:"time"`   // RFC 3339, UTC
	Step         int      `json:"step"`   // 1-based: the steps done
	Steps        int      `json:"steps"`
	Loss         *float64 `json:"loss,omitempty"` // none when emulated
	Emulated     bool     `json:"emulated,omitempty"`
	SamplesPerS  float64  `json:"samples_per_s,omitempty"` // since this generation started
	ElapsedS     float64  `json:"elapsed_s,omitempty"`     // since this generation started
	ETAS         float64  `json:"eta_s,omitempty"`
	EvalLoss     *float64 `json:"eval_loss,omitempty"`
	EvalAccuracy *float64 `json:"eval_accuracy,omitempty"`
	EvalSamples  int      `json:"eval_samples,omitempty"`
	LR           float64  `json:"lr,omitempty"` // the step's learning rate
}

// step reports that iteration i (0-based) ended with loss.
func (p *progress) step(i int64, loss float64) {
	n := int(i) + 1
	done := max(1, n-p.from)
	now := p.now()
	el := max(now.Sub(p.began).Seconds(), 1e-9)
	rate := float64(p.batch) * float64(done) / el
	eta := el / float64(done) * float64(p.steps-n)
	logged := n == p.from+1 || n == p.steps || n%p.every == 0
	if logged && p.metrics != nil && p.metricsErr == nil {
		m := metricsLine{Format: metricsFormat, Time: now.UTC().Format(time.RFC3339Nano), Step: n, Steps: p.steps,
			SamplesPerS: rate, ElapsedS: el, ETAS: eta, Emulated: p.emulated}
		if !p.emulated {
			m.Loss = &loss
		}
		if p.lr != nil {
			m.LR = p.lr(int(i))
		}
		p.writeMetrics(m)
	}
	if p.quiet {
		return
	}
	lr := ""
	if p.lr != nil {
		lr = fmt.Sprintf(", lr %.4g", p.lr(int(i)))
	}
	line := fmt.Sprintf("step %d/%d: loss %.6g%s%s, %.4g samples/s, ETA %.0fs%s", n, p.steps, loss, lr, p.kept, rate, eta, p.lastEval)
	if p.emulated {
		line = fmt.Sprintf("step %d/%d: %.4g samples/s, ETA %.0fs", n, p.steps, rate, eta)
	}
	if p.skips > 0 {
		line += fmt.Sprintf(", %d skipped", p.skips)
	}
	if p.bar {
		width := 40 * n / p.steps
		fmt.Fprintf(p.log, "\r\033[K[%s%s] %s", strings.Repeat("=", width), strings.Repeat(" ", 40-width), line)
		if n == p.steps {
			fmt.Fprintln(p.log)
		}
		return
	}
	if logged {
		fmt.Fprintln(p.log, line)
	}
}

// eval reports an evaluation: on a line of its own without a terminal, at
// the end of every progress line after it, and as a metrics line.
func (p *progress) eval(r stage.EvalResult) {
	p.lastEval = "; " + evalLine(r)
	if p.metrics != nil && p.metricsErr == nil {
		m := metricsLine{Format: metricsFormat, Time: p.now().UTC().Format(time.RFC3339Nano), Step: r.Step, Steps: p.steps,
			EvalLoss: &r.Loss, EvalSamples: r.Samples}
		if r.HasAccuracy() {
			m.EvalAccuracy = &r.Accuracy
		}
		p.writeMetrics(m)
	}
	if !p.quiet && !p.bar {
		fmt.Fprintf(p.log, "step %d/%d: %s\n", r.Step, p.steps, evalLine(r))
	}
}

func (p *progress) writeMetrics(m metricsLine) {
	b, _ := json.Marshal(m)
	if _, err := p.metrics.Write(append(b, '\n')); err != nil {
		p.metricsErr = err
		fmt.Fprintf(p.log, "graphpipe: --metrics: %v: no more metrics lines\n", cause(err))
	}
}

// abort ends a bar's line when a generation fails.
// skipped reports that iteration i's update was skipped on every stage.
func (p *progress) skipped(i int64, why string) {
	p.skips++
	if !p.quiet {
		fmt.Fprintf(p.log, "graphpipe: step %d: %s: its update skipped on every stage\n", i+1, why)
	}
}

func (p *progress) abort() {
	if p.bar && !p.quiet {
		fmt.Fprintln(p.log)
	}
}

// openMetrics opens --metrics: appended to when the run resumes (one file
// follows a run across its resumptions), made anew otherwise; 0666 less
// the umask.
func openMetrics(path string, resume bool) (*os.File, error) {
	mode := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if resume {
		mode = os.O_WRONLY | os.O_CREATE | os.O_APPEND
	}
	f, err := os.OpenFile(path, mode, 0o666)
	if err != nil {
		return nil, usagef("--metrics %s: %v", path, cause(err))
	}
	return f, nil
}

// isTerminal says whether w is a character device (a terminal): progress is
// then one line redrawn in place, plain log lines otherwise.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// backprop hears iteration i's samples with a backward pass (selective
// backprop), which its line shows.
func (p *progress) backprop(i int64, samples int) {
	p.kept = keptLine(samples, int(p.batch))
}
