package main

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// BenchmarkRecovery times the path from a lost agent to training again, per
// phase, for the small presets: a 3-agent pool runs a 3-device plan with
// --elastic --replace-wait 0s; one agent is SIGKILLed after the first
// checkpoint, and with no spare the run re-plans onto the 2 left. It
// reports each phase's seconds (what the run itself measured and printed)
// and detect/total: the share of the heartbeat timeout (1.5 s, and the
// default 4 s for mmt) in the whole. wait-s is the heartbeat and a quarter
// a pool's count waits for a lost agent's adverts to go stale.
func BenchmarkRecovery(b *testing.B) {
	type bench struct{ model, heartbeat string }
	var cases []bench
	for _, name := range []string{"mmt", "dlrm", "candle-uno", "case-study", "transformer", "mlp"} {
		cases = append(cases, bench{name, "1500ms"})
	}
	cases = append(cases, bench{"mmt", "4s"}) // the default heartbeat timeout
	for _, bc := range cases {
		name := bc.model
		b.Run(name+"/heartbeat-"+bc.heartbeat, func(b *testing.B) {
			model := smallModel(b, name)
			dir := b.TempDir()
			plan := filepath.Join(dir, "plan.json")
			if code, _, errs := gp(b, "", "search", model, "--devices", "3", "--device", "cpu", "--micro-batch", "4", "-o", plan); code != 0 {
				b.Fatal(errs)
			}
			p := newTestPool(b)
			var sum Phases
			for i := range b.N {
				pool := fmt.Sprintf("bench%s%s%d", name, bc.heartbeat, i)
				var agents []*agentProc
				for range 3 {
					agents = append(agents, p.agent(b, pool, ""))
				}
				ck := filepath.Join(dir, fmt.Sprint("ck", i))
				c := p.startRun(b, pool, plan, "--model", model, "--steps", "100000", "--restarts", "1", "--elastic", "--replace-wait", "0s",
					"--checkpoint", ck, "--checkpoint-every", "5", "--heartbeat-timeout", bc.heartbeat, "--run", pool)
				waitCheckpoint(b, ck)
				syscall.Kill(agents[1].cmd.Process.Pid, syscall.SIGKILL)
				c.waitLog(b, "graphpipe: training again at step", 30*time.Second)
				c.cmd.Process.Signal(syscall.SIGINT) // stop at once: the figures are out
				c.waitCode(b, 30*time.Second)
				r, err := parseRecovery(c.stderr())
				if err != nil {
					b.Fatal(err)
				}
				sum.add(r)
			}
			n := float64(b.N)
			b.ReportMetric(sum.Detect/n, "detect-s")
			b.ReportMetric(sum.Stop/n, "stop-s")
			b.ReportMetric(sum.Wait/n, "wait-s")
			b.ReportMetric(sum.Replan/n, "replan-s")
			b.ReportMetric(sum.Resume/n, "resume-s")
			b.ReportMetric(sum.Total/n, "total-s")
			b.ReportMetric(sum.Detect/sum.Total, "detect/total")
		})
	}
}
