package microbatch

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
)

// The Chrome trace of an iteration (what graphpipe sim --trace and run
// --trace write, and what Perfetto opens) has three processes:
//
//	pid 1 "stages":   one thread per stage (tid = stage): its forwards, backwards and weight gradients
//	pid 2 "links":    one thread per edge (tid = edge): the sends along it, args.stage the sender
//	pid 3 "receives": one thread per edge (tid = edge): the receives from it, args.stage the receiver
//	pid 4 "all-reduce": one thread per stage with measured all-reduce spans (AllReduce), each a bucket
//
// Times are in microseconds (ts, dur), as the format has them.
const (
	pidStages    = 1
	pidSends     = 2
	pidReceives  = 3
	pidAllReduce = 4
)

// traceEvent is one Chrome trace event.
type traceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`
	Dur  float64        `json:"dur,omitempty"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// Trace renders a simulated (or measured) iteration as Chrome trace event
// JSON. stageNames labels the stage threads (nil: "stage N").
func Trace(res *Result, stages int, stageNames []string) []byte {
	var evs []traceEvent
	meta := func(pid, tid int, name string) {
		evs = append(evs, traceEvent{Name: "thread_name", Ph: "M", Pid: pid, Tid: tid, Args: map[string]any{"name": name}})
	}
	for i, name := range []string{"stages", "links", "receives"} {
		evs = append(evs, traceEvent{Name: "process_name", Ph: "M", Pid: pidStages + i, Args: map[string]any{"name": name}})
	}
	for s := 0; s < stages; s++ {
		meta(pidStages, s, stageName(stageNames, s))
	}
	threads := map[[2]int]bool{}
	for _, e := range res.Events {
		ev := traceEvent{Ph: "X", Ts: e.Start * 1e6, Dur: (e.End - e.Start) * 1e6, Args: map[string]any{"micro_batch": e.MB}}
		switch e.Kind {
		case Send, Recv:
			ev.Pid, ev.Tid, ev.Cat = pidSends, e.Edge, "transfer"
			ev.Name = fmt.Sprintf("%s %d", dirName(e.Dir), e.MB)
			if e.Kind == Recv {
				ev.Pid, ev.Cat, ev.Name = pidReceives, "receive", "receive "+ev.Name
			}
			ev.Args["stage"] = e.Stage
			if k := [2]int{ev.Pid, e.Edge}; !threads[k] {
				threads[k] = true
				meta(ev.Pid, e.Edge, fmt.Sprintf("edge %d", e.Edge))
			}
		case AllReduce:
			ev.Name, ev.Cat, ev.Pid, ev.Tid = fmt.Sprintf("all-reduce bucket %d", e.MB), "all-reduce", pidAllReduce, e.Stage
			ev.Args = map[string]any{"bucket": e.MB}
			if k := [2]int{ev.Pid, e.Stage}; !threads[k] {
				threads[k] = true
				if named := [2]int{pidAllReduce, -1}; !threads[named] { // the process, named once
					threads[named] = true
					evs = append(evs, traceEvent{Name: "process_name", Ph: "M", Pid: pidAllReduce, Args: map[string]any{"name": "all-reduce"}})
				}
				meta(ev.Pid, e.Stage, stageName(stageNames, e.Stage))
			}
		default:
			ev.Name, ev.Cat, ev.Pid, ev.Tid = fmt.Sprintf("%c%d", e.Kind, e.MB), kindName(e.Kind), pidStages, e.Stage
		}
		evs = append(evs, ev)
	}
	out, _ := json.MarshalIndent(map[string]any{"traceEvents": evs, "displayTimeUnit": "ms"}, "", " ")
	return out
}

func stageName(names []string, s int) string {
	if s < len(names) && names[s] != "" {
		return names[s]
	}
	return fmt.Sprintf("stage %d", s)
}

func dirName(d Dir) string {
	if d == Grad {
		return "gradients"
	}
	return "activations"
}

func kindName(k Kind) string {
	switch k {
	case Forward:
		return "forward"
	case Backward:
		return "backward"
	case Weight:
		return "weight-gradient"
	}
	return "transfer"
}

// TraceError is a trace that ParseTrace cannot read: Event is the index of
// the event at fault in traceEvents (-1: the file as a whole).
type TraceError struct {
	Event int
	Field string
	Why   string
}

func (e *TraceError) Error() string {
	if e.Event < 0 {
		return "trace: " + e.Why
	}
	return fmt.Sprintf("trace event %d: %s: %s", e.Event, e.Field, e.Why)
}

// maxTraceThreads bounds the stage and edge numbers a trace may name, so
// that a hostile file cannot make ParseTrace allocate without end.
const maxTraceThreads = 1 << 16

// ParseTrace reads what Trace writes back into a Result and the stage
// threads' names (one per stage, "stage N" where the trace names none).
// The Result is Timeline's, every stage one device. Events of other processes, and metadata other than
// thread names, are skipped.
func ParseTrace(data []byte) (*Result, []string, error) {
	var doc struct {
		TraceEvents []json.RawMessage `json:"traceEvents"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, nil, &TraceError{Event: -1, Why: "not Chrome trace JSON: " + err.Error()}
	}
	if doc.TraceEvents == nil {
		return nil, nil, &TraceError{Event: -1, Why: "no traceEvents array"}
	}
	var events []Event
	named := map[int]string{}
	stages := 0
	for i, raw := range doc.TraceEvents {
		var ev traceEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, nil, &TraceError{Event: i, Field: "event", Why: err.Error()}
		}
		if ev.Pid < pidStages || ev.Pid > pidReceives {
			continue
		}
		if ev.Tid < 0 || ev.Tid >= maxTraceThreads {
			return nil, nil, &TraceError{i, "tid", fmt.Sprintf("%d is out of range", ev.Tid)}
		}
		switch ev.Ph {
		case "M":
			if ev.Name == "thread_name" && ev.Pid == pidStages {
				name, _ := ev.Args["name"].(string)
				named[ev.Tid] = name
				stages = max(stages, ev.Tid+1)
			}
			continue
		case "X":
		default:
			continue
		}
		e, err := traceToEvent(ev)
		if err != nil {
			err.Event = i
			return nil, nil, err
		}
		stages = max(stages, e.Stage+1)
		events = append(events, e)
	}
	if err := overlaps(events); err != nil {
		return nil, nil, err
	}
	names := make([]string, stages)
	for s := range names {
		names[s] = stageName(nil, s)
		if n := named[s]; n != "" {
			names[s] = n
		}
	}
	return Timeline(events, stages, nil), names, nil
}

// overlaps refuses a stage's compute events that overlap: a stage computes
// one thing at a time. (Recorded times may touch within a nanosecond.)
func overlaps(events []Event) *TraceError {
	idx := make([]int, 0, len(events))
	for i, e := range events {
		if e.Compute() {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool {
		ea, eb := events[idx[a]], events[idx[b]]
		return ea.Stage < eb.Stage || ea.Stage == eb.Stage && ea.Start < eb.Start
	})
	for k := 1; k < len(idx); k++ {
		prev, e := events[idx[k-1]], events[idx[k]]
		if e.Stage == prev.Stage && e.Start < prev.End-1e-9 {
			return &TraceError{Event: -1, Why: fmt.Sprintf("stage %d computes %c%d and %c%d at once (%.6g s)", e.Stage, prev.Kind, prev.MB, e.Kind, e.MB, e.Start)}
		}
	}
	return nil
}

// traceToEvent reads one complete ("X") event.
func traceToEvent(ev traceEvent) (Event, *TraceError) {
	bad := func(field, why string) (Event, *TraceError) { return Event{}, &TraceError{Field: field, Why: why} }
	if math.IsNaN(ev.Ts) || math.IsInf(ev.Ts, 0) || ev.Ts < 0 {
		return bad("ts", fmt.Sprintf("%v is not a time in the iteration", ev.Ts))
	}
	if math.IsNaN(ev.Dur) || math.IsInf(ev.Dur, 0) || ev.Dur < 0 {
		return bad("dur", fmt.Sprintf("%v is not a duration", ev.Dur))
	}
	mb, ok := intArg(ev.Args, "micro_batch")
	if !ok {
		return bad("args.micro_batch", "missing or not a count")
	}
	e := Event{MB: mb, Start: ev.Ts / 1e6, End: (ev.Ts + ev.Dur) / 1e6}
	if ev.Pid == pidStages {
		e.Stage = ev.Tid
		for _, k := range []Kind{Forward, Backward, Weight} {
			if ev.Cat == kindName(k) {
				e.Kind = k
			}
		}
		if e.Kind == 0 {
			return bad("cat", fmt.Sprintf("%q is not forward, backward or weight-gradient", ev.Cat))
		}
		return e, nil
	}
	e.Kind, e.Edge = Send, ev.Tid
	name := ev.Name
	if ev.Pid == pidReceives {
		e.Kind, name = Recv, strings.TrimPrefix(name, "receive ")
	}
	switch {
	case strings.HasPrefix(name, dirName(Act)+" "):
		e.Dir = Act
	case strings.HasPrefix(name, dirName(Grad)+" "):
		e.Dir = Grad
	default:
		return bad("name", fmt.Sprintf("%q names neither activations nor gradients", ev.Name))
	}
	if e.Stage, ok = intArg(ev.Args, "stage"); !ok || e.Stage >= maxTraceThreads {
		return bad("args.stage", "missing or not a stage")
	}
	return e, nil
}

// intArg reads a non-negative whole number from a trace event's args.
func intArg(args map[string]any, key string) (int, bool) {
	v, ok := args[key].(float64)
	if !ok || v < 0 || v != math.Trunc(v) || v > math.MaxInt32 {
		return 0, false
	}
	return int(v), true
}

// Timeline is the Result of a measured iteration's events: Iteration is the
// last event's end; Busy, Idle and Bubble come from the compute events, each
// stage weighing as many devices as devices says (nil: one each), as in
// Simulate. InFlight and PeakMemory are left empty.
func Timeline(events []Event, stages int, devices []int) *Result {
	r := &Result{Events: events, Busy: make([]float64, stages), Idle: make([]float64, stages)}
	for _, e := range events {
		r.Iteration = max(r.Iteration, e.End)
		if e.Compute() && e.Stage < stages {
			r.Busy[e.Stage] += e.End - e.Start
		}
	}
	var devTime, busyTime float64
	for s := range r.Idle {
		r.Idle[s] = r.Iteration - r.Busy[s]
		d := 1.0
		if s < len(devices) {
			d = float64(devices[s])
		}
		devTime += d * r.Iteration
		busyTime += d * r.Busy[s]
	}
	if devTime > 0 {
		r.Bubble = 1 - busyTime/devTime
	}
	return r
}
