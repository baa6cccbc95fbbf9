package runtime

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// WorkerMemory is what one worker holds of its stage's training state at
// the end of a run, as it measured it (run --json's memory): its
// parameters (float32, every one: a sharded stage's replicas hold them
// all) and its optimizer state (a sharded stage's replica its shard; a
// stage whose state is offloaded, what its host holds), and the peak
// resident set of its process (VmHWM; the whole process where workers
// share one, as RunLocal's do; 0 where the system does not say).
type WorkerMemory struct {
	Worker              int    `json:"worker"`
	Stage               int    `json:"stage"`
	Replica             int    `json:"replica"`
	OptimizerState      string `json:"optimizer_state"` // where it lives: the plan's placement (plan.StatePlacements)
	ParameterBytes      int64  `json:"parameter_bytes"`
	OptimizerStateBytes int64  `json:"optimizer_state_bytes"`
	PeakRSSBytes        int64  `json:"peak_rss_bytes"`
}

// Memory is what the worker holds now (nil when emulating: it holds none).
func (w *Worker) Memory() *WorkerMemory {
	if w.Emulate {
		return nil
	}
	m := w.ex.Memory()
	return &WorkerMemory{Worker: int(w.ID), Stage: w.Stage, Replica: w.Replica, OptimizerState: w.role.plan.Stages[w.Stage].StateName(),
		ParameterBytes: m.ParameterBytes, OptimizerStateBytes: m.OptimizerStateBytes, PeakRSSBytes: peakRSS()}
}

// peakRSS is this process's peak resident set (VmHWM of
// /proc/self/status), 0 where there is none.
func peakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(l), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}

// keepMemory puts worker id's memory into the result's, by worker id.
func (r *Result) keepMemory(id, workers int, m *WorkerMemory) {
	if m == nil {
		return
	}
	if r.Memory == nil {
		r.Memory = make([]WorkerMemory, workers)
	}
	r.Memory[id] = *m
}
